#!/usr/bin/perl

# A request is counted once, even when index, try_files or error_page re-run
# the access phase; subrequests are never counted (docs/operations.md, "How a request is decided").

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Test::PowShield qw(http_conf);

###############################################################################

my $t = Test::PowShield->new;

plan skip_all => 'nginx built without ngx_http_ssi_module'
    unless $t->has_module('ssi');

$t->write_file_expand('nginx.conf', http_conf(<<'EOF'));
    server {
        %%TEST_SERVER%%

        pow_shield_key $http_x_client;
        pow_shield_difficulty 1;

        location /idx/ {
            pow_shield_limit 3 1h;
            index index.json;
        }

        location /tf/ {
            pow_shield_limit 3 1h;
            try_files $uri /tf/fallback.json;
        }

        location /ep/ {
            pow_shield_limit 3 1h;
            error_page 404 /ep/notfound.json;
        }

        # error_page into another shielded location with another limit
        location /epa/ {
            pow_shield_limit 3 1h;
            error_page 404 /epb/notfound.json;
        }

        location /epb/ {
            pow_shield_limit 5 1h;
        }

        # unshielded location redirecting into a shielded one
        location /open/ {
            try_files $uri /idx/index.json;
        }

        # unshielded page with shielded includes
        location /page/ {
            ssi on;
        }

        # shielded page with shielded includes
        location /spage/ {
            pow_shield_limit 1 1h;
            ssi on;
        }

        location /inc/ {
            pow_shield_limit 1 1h;
        }
    }
EOF

$t->write_file('html/idx/index.json', qq({"index":true}\n));
$t->write_file('html/tf/fallback.json', qq({"fallback":true}\n));
$t->write_file('html/ep/notfound.json', qq({"notfound":true}\n));
$t->write_file('html/inc/a.json', qq({"inc":1}));
$t->write_file('html/epb/notfound.json', qq({"epb":true}\n));
my $page = join "\n", ('<!--# include virtual="/inc/a.json" -->') x 3;
$t->write_file('html/page/p.html', "$page\n");
$t->write_file('html/spage/p.html', "$page\n");

$t->run;

###############################################################################

sub get {
    my ($client, $uri) = @_;
    return $t->http_get($uri, 'X-Client' => $client);
}

# index: "/idx/" is redirected internally to "/idx/index.json"

my $r = get('index', '/idx/');
is($r->status, 200, 'index: 200');
is($r->body, qq({"index":true}\n), 'index: index file served');
is($r->header('X-RateLimit-Remaining'), 2, 'index: counted once (3 - 1)');
is(get('index', '/idx/')->header('X-RateLimit-Remaining'), 1,
    'index: second request counted once');
is(get('index', '/idx/')->status, 200, 'index: third request passes');
is(get('index', '/idx/')->status, 429, 'index: fourth request is 429');

# try_files: a missing file falls back to another URI

$r = get('tf', '/tf/missing.json');
is($r->status, 200, 'try_files: 200');
is($r->body, qq({"fallback":true}\n), 'try_files: fallback served');
is($r->header('X-RateLimit-Remaining'), 2, 'try_files: counted once');
is(get('tf', '/tf/missing.json')->header('X-RateLimit-Remaining'), 1,
    'try_files: second request counted once');
is(get('tf', '/tf/missing.json')->status, 200, 'try_files: third passes');
is(get('tf', '/tf/missing.json')->status, 429, 'try_files: fourth is 429');

# error_page: the 404 is redirected to an error document

$r = get('ep', '/ep/missing.json');
is($r->status, 404, 'error_page: 404 kept');
is($r->body, qq({"notfound":true}\n), 'error_page: error document served');
is($r->header('X-RateLimit-Remaining'), 2, 'error_page: counted once');
is(scalar(my @v = $r->header_values('X-RateLimit-Remaining')), 1,
    'error_page: headers sent once');
is(get('ep', '/ep/missing.json')->header('X-RateLimit-Remaining'), 1,
    'error_page: second request counted once');
is(get('ep', '/ep/missing.json')->status, 404, 'error_page: third passes');
is(get('ep', '/ep/missing.json')->status, 429, 'error_page: fourth is 429');

# error_page into another shielded location: counted once, in the bucket
# of the location that was asked for

$r = get('epab', '/epa/missing.json');
is($r->status, 404, 'error_page into another shielded location: 404');
is($r->body, qq({"epb":true}\n), 'error_page into another location: served');
is(get('epab', '/epa/missing.json')->status, 404, 'second request: 404');
is(get('epab', '/epa/missing.json')->status, 404, 'third request: 404');
is(get('epab', '/epa/missing.json')->status, 429,
    'fourth request: 429 (limit 3 of the first location, counted once)');
$r = get('epab', '/epb/notfound.json');
is($r->header('X-RateLimit-Remaining'), 4,
    'the error_page target location was not counted (5 - 1)');

# an unshielded location redirecting into a shielded one: counted once

$r = get('open', '/open/missing.json');
is($r->status, 200, 'unshielded -> shielded redirect: 200');
is($r->body, qq({"index":true}\n), 'unshielded -> shielded: target served');
is($r->header('X-RateLimit-Remaining'), 2,
    'unshielded -> shielded: counted once in the target (3 - 1)');

# SSI subrequests into a shielded location (limit 1) are never counted

$r = get('ssi', '/page/p.html');
is($r->status, 200, 'SSI page: 200');
is($r->body, join("\n", ('{"inc":1}') x 3) . "\n",
    'SSI: three includes of a limit-1 location all rendered');
ok(!$r->has_header('X-RateLimit-Limit'),
    'SSI: unshielded page has no rate-limit headers');
$r = get('ssi', '/inc/a.json');
is($r->status, 200, 'after the SSI page, a direct request passes');
is($r->header('X-RateLimit-Remaining'), 0,
    'the subrequests did not use the bucket');

# a shielded page: the main request counts, its subrequests do not

$r = get('spage', '/spage/p.html');
is($r->status, 200, 'shielded SSI page: 200');
is($r->header('X-RateLimit-Remaining'), 0, 'shielded SSI page: counted once');
is($r->body, join("\n", ('{"inc":1}') x 3) . "\n",
    'shielded SSI page: includes rendered, not challenged');
is(get('spage', '/spage/p.html')->status, 429,
    'shielded SSI page: the next main request is 429');

###############################################################################

$t->done_testing;
