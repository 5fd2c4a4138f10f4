#!/usr/bin/perl

# Build shape (b) (docs/building.md, "For your own nginx"): the module built against Debian's nginx
# source (objs/debian/, made by `make test`) loads into /usr/sbin/nginx and
# shields requests.  Skipped only on machines without Debian's nginx or
# before that module is built.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Test::PowShield qw(:pow http_conf);

###############################################################################

my $nginx = $ENV{TEST_NGINX_DEBIAN_BINARY} || '/usr/sbin/nginx';
my $module = $ENV{TEST_NGINX_DEBIAN_MODULE}
    || "$Test::PowShield::REPO/objs/debian/ngx_http_pow_shield_module.so";

plan skip_all => "Debian nginx $nginx not installed" unless -x $nginx;
plan skip_all => "$module not built (make test builds it against"
    . " /usr/share/nginx/src)" unless -f $module;

my $t = Test::PowShield->new(binary => $nginx, module => $module);

$t->write_file_expand('nginx.conf', http_conf(<<'EOF'));
    pow_shield_secret "debian-suite-secret-0123456789abcdef";

    server {
        %%TEST_SERVER%%

        location /api/ {
            pow_shield_limit 2 1h;
            pow_shield_difficulty 1;
        }
    }
EOF

$t->write_file('html/api/data.json', qq({"ok":true}\n));

# nginx -t with load_module on the Debian build

my ($rc, $out) = $t->test_config;
is($rc, 0, 'nginx -t with the module loaded into Debian nginx') or diag($out);
$t->allow_emerg(0);

$t->run;

# green, then 429 with a challenge after the limit, then solved

my $r = $t->http_get('/api/data.json');
is($r->status, 200, 'request 1 of 2: 200');
is($r->header('X-RateLimit-Remaining'), 1, 'rate-limit headers');
is($t->http_get('/api/data.json')->status, 200, 'request 2 of 2: 200');

$r = $t->http_get('/api/data.json');
is($r->status, 429, 'request 3: 429');
is(($r->json || {})->{error}, 'PoW challenge required', '429: challenge body');

$r = $t->http_get('/api/data.json', solution($r));
is($r->status, 200, 'solved challenge: 200');

###############################################################################

$t->done_testing;
