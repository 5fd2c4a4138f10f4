#!/usr/bin/perl

# Local mode's straight path (pow_shield_core::decision::straight): the
# common request of a location with one limit (its rate-limit headers on or
# off: t/pow_shield_straight_headers.t compares them with the full path's)
# is decided in one pass, without a request state, and answers exactly as
# the full path: counted once across index, try_files and error_page
# (into another shielded location too), the variables log what the full
# path logs, the last free request of pow_shield_pay_ahead carries the
# next challenge, a client over the limit is challenged and struck, and
# the metrics count every request. With the default key (the peer's
# address, read in place), a request redirected into a location whose
# realip rewrites the address is counted there under the new address, as
# the full path counts it; and the straight path's debug line shows it
# ran (local mode) or not (cluster mode); a client struck after it passed
# is blocked on its next request (its bucket's remembered breaker
# generation is then old). Every assertion in local mode, where
# the straight path runs, and in cluster mode, where it never does
# (Test::PowShield::Modes each_mode): the same answers.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Test::PowShield qw(:redis http_conf);
use Test::PowShield::Modes;
use Test::PowShield::Metrics qw(scrape metric);

###############################################################################

my $conf = http_conf(<<'EOF');
    %%REDIS%%

    log_format straight '$http_x_client $uri $status $pow_shield_result '
                        '$pow_shield_remaining $pow_shield_strikes';

    server {
        %%TEST_SERVER%%
        access_log %%TESTDIR%%/straight.log straight;

        pow_shield_key $http_x_client;
        pow_shield_headers off;
        pow_shield_difficulty 1;

        location /s/ {
            pow_shield_limit 3 1h;
        }

        location /idx/ {
            pow_shield_limit 3 1h;
            index index.json;
        }

        location /tf/ {
            pow_shield_limit 3 1h;
            try_files $uri /tf/fallback.json;
        }

        location /epa/ {
            pow_shield_limit 3 1h;
            error_page 404 /epb/notfound.json;
        }

        location /epb/ {
            pow_shield_limit 5 1h;
        }

        # unshielded, redirecting into a shielded location
        location /open/ {
            try_files $uri /idx/index.json;
        }

        location /ahead/ {
            pow_shield_limit 3 1h;
            pow_shield_pay_ahead on;
        }

        # A breaker of one strike: a client struck in /gs/ is blocked in
        # /g/ (one breaker a client key).
        location /g/ {
            pow_shield_limit 100 1h;
            pow_shield_strikes 1 1h;
        }

        location /gs/ {
            pow_shield_limit 1 1h;
            pow_shield_strikes 1 1h;
        }

        location = /metrics {
            pow_shield_status;
        }
    }

    # The default key (the peer's address): read in place by the straight
    # path, and made again from the text it was counted under after a
    # redirect into a location whose realip rewrites the address.
    server {
        listen 127.0.0.1:%%PORT_8081%%;
        server_name localhost;
        root %%TESTDIR%%/html;

        pow_shield_headers off;
        pow_shield_difficulty 1;
        add_header X-Rem $pow_shield_remaining always;

        # As /g/ and /gs/, by the default key (the address realip sets)
        location /dg/ {
            set_real_ip_from 127.0.0.1;
            real_ip_header X-Real-IP;
            pow_shield_limit 100 1h;
            pow_shield_strikes 1 1h;
        }

        location /dgs/ {
            set_real_ip_from 127.0.0.1;
            real_ip_header X-Real-IP;
            pow_shield_limit 1 1h;
            pow_shield_strikes 1 1h;
        }

        # (4: a bucket of its own, apart from /a/'s 3 per hour)
        location /d/ {
            pow_shield_limit 4 1h;
        }

        location /a/ {
            pow_shield_limit 3 1h;
            try_files $uri /b/data.json;
        }

        location /b/ {
            set_real_ip_from 127.0.0.1;
            real_ip_header X-Real-IP;
            pow_shield_limit 3 1h;
            pow_shield_difficulty 8b;
        }
    }
EOF

my %files = (
    'html/s/data.json'        => qq({"s":true}\n),
    'html/idx/index.json'     => qq({"index":true}\n),
    'html/tf/fallback.json'   => qq({"fallback":true}\n),
    'html/epb/notfound.json'  => qq({"epb":true}\n),
    'html/ahead/data.json'    => qq({"ahead":true}\n),
    'html/d/data.json'        => qq({"d":true}\n),
    'html/b/data.json'        => qq({"b":true}\n),
    'html/g/data.json'        => qq({"g":true}\n),
    'html/gs/data.json'       => qq({"gs":true}\n),
    'html/dg/data.json'       => qq({"dg":true}\n),
    'html/dgs/data.json'      => qq({"dgs":true}\n),
);

###############################################################################

sub get {
    my ($t, $client, $uri) = @_;
    return $t->http_get($uri, 'X-Client' => $client);
}

# The access log's lines of $client: "uri status result remaining strikes".
sub logged {
    my ($t, $client) = @_;
    my $log = $t->read_file('straight.log') // '';
    return map { /^\Q$client\E (.*)$/ ? $1 : () } split /\n/, $log;
}

Test::PowShield::Modes->each_mode($conf, files => \%files, sub {
    my ($m) = @_;
    my $t = $m->node(1);

    # Under the limit: passed, with what the variables log

    my @s = map { get($t, 's', '/s/data.json')->status } 1 .. 3;
    is("@s", '200 200 200', "$m: three requests under the limit pass");
    ok(!get($t, 'quiet', '/s/data.json')->has_header('X-RateLimit-Remaining'),
        "$m: no rate-limit headers (pow_shield_headers off)");
    my $r = get($t, 's', '/s/data.json');
    is($r->status, 429, "$m: the fourth is 429");
    ok(defined $r->header('X-PoW-Challenge'), "$m: ... with its challenge");
    is(join('|', logged($t, 's')),
        '/s/data.json 200 pass 2 0|/s/data.json 200 pass 1 0|'
        . '/s/data.json 200 pass 0 0|/s/data.json 429 challenge 0 1',
        "$m: the variables log result, remaining and strikes of each");

    # Internal redirects: each request counted once

    my @idx = map { get($t, 'idx', '/idx/')->status } 1 .. 4;
    is("@idx", '200 200 200 429', "$m: index: counted once a request");
    my @tf = map { get($t, 'tf', '/tf/missing.json')->status } 1 .. 4;
    is("@tf", '200 200 200 429', "$m: try_files: counted once a request");
    is((logged($t, 'tf'))[0], '/tf/fallback.json 200 pass 2 0',
        "$m: try_files: the variables after the redirect");

    $r = get($t, 'epab', '/epa/missing.json');
    is($r->status, 404, "$m: error_page into another shielded location: 404");
    is($r->body, qq({"epb":true}\n), "$m: ... its document served");
    my @ep = map { get($t, 'epab', '/epa/missing.json')->status } 1 .. 3;
    is("@ep", '404 404 429', "$m: ... counted once, by the first location's limit");
    is((logged($t, 'epab'))[0], '/epb/notfound.json 404 pass 2 0',
        "$m: ... the variables after it");
    get($t, 'epab', '/epb/notfound.json');
    is((logged($t, 'epab'))[-1], '/epb/notfound.json 200 pass 4 1',
        "$m: the target location had not counted it (5 - 1; the 429 struck)");

    get($t, 'open', '/open/missing.json');
    is((logged($t, 'open'))[0], '/idx/index.json 200 pass 2 0',
        "$m: unshielded -> shielded: counted once in the target");

    # Paying ahead: the last free request carries the next challenge

    my @next = map { defined(get($t, 'ahead', '/ahead/data.json')
        ->header('X-PoW-Next-Challenge')) ? 1 : 0 } 1 .. 3;
    is("@next", '0 0 1', "$m: pay ahead: only the last free request gets the next challenge");

    # A client passed without a breaker (its bucket remembers the breaker
    # table's generation), then struck in another location: its next
    # request is not the straight path's (a breaker was inserted since),
    # and its breaker blocks it.

    my @g = map { get($t, 'gen', $_)->status }
        '/g/data.json', '/g/data.json', '/gs/data.json', '/gs/data.json';
    is("@g", '200 200 200 429', "$m: a client passes, then is struck in another location");
    $r = get($t, 'gen', '/g/data.json');
    is($r->status . ' ' . ($r->header('X-PoW-Shield') // '-'), '403 blocked',
        "$m: ... its next request, in the first location, is blocked");

    my $d = sub { $t->http_get($_[0], -port => 8081, @_[1 .. $#_]) };

    # The same by the default key: its bucket key holds the address, from
    # which the straight path makes the key it searches the breakers for.

    my $dg = sub { $d->($_[0], 'X-Real-IP' => '10.7.7.7') };
    @g = map { $dg->($_)->status }
        '/dg/data.json', '/dg/data.json', '/dgs/data.json', '/dgs/data.json';
    is("@g", '200 200 200 429', "$m: default key: a client passes, then is struck elsewhere");
    $r = $dg->('/dg/data.json');
    is($r->status, 403, "$m: ... its next request, in the first location, is blocked");

    # Default key, then a redirect into a location whose realip rewrites
    # the address: the state is made with the address the request was
    # counted under, and the target counts it under the new one. (First:
    # the 429 below strikes 127.0.0.1, whose requests then take the full
    # path.)

    my $real = sub { $d->($_[0], 'X-Real-IP' => '10.9.8.7') };
    my @rem = map { my $r = $real->($_); $r->status . '/' . ($r->header('X-Rem') // '-') }
        '/b/data.json', '/a/missing.json', '/b/data.json';
    is("@rem", '200/2 200/1 200/0',
        "$m: realip after a redirect: counted again under the rewritten address");

    # The default key, read in place: counted per address

    my @d = map { $d->('/d/data.json')->status } 1 .. 5;
    is("@d", '200 200 200 200 429', "$m: default key: four pass, the fifth is 429");

    # The straight path was taken (local mode) or not (cluster mode): its
    # line at debug level, one per request it passed (the fourth, the
    # last free one, pays ahead, the default: the full path's)

    my $passed = () = ($t->read_file('error.log') // '')
        =~ m{straight path: passed, remaining=\d+, uri=/d/data\.json$}mg;
    is($passed, "$m" eq 'local' ? 3 : 0,
        "$m: the straight path passed the default key's requests in local mode only");
    my $redirected = () = ($t->read_file('error.log') // '')
        =~ m{straight path: passed, remaining=2, uri=/a/missing\.json$}mg;
    is($redirected, "$m" eq 'local' ? 1 : 0,
        "$m: ... and the request redirected into realip's location");

    # Metrics: every request counted, by result

    my $scraped = scrape($t, '/metrics');
    is(metric($scraped, 'pow_shield_requests_total', result => 'pass'), 32,
        "$m: metrics: every passed request counted");
});

###############################################################################

Test::PowShield::Modes->done_testing;
