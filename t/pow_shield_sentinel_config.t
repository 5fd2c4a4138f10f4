#!/usr/bin/perl

# pow_shield_redis sentinel://... at "nginx -t" (docs/directives.md,
# "pow_shield_redis"): the URL form and the options that go with it are
# checked, a refusal names the directive, the value, file and line and
# never shows a password.  No sentinel is needed: nginx -t does not connect.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Test::PowShield qw(http_conf);
use Test::PowShield::ConfigCases;

###############################################################################

my $t = Test::PowShield->new;

my $template = http_conf(<<'EOF');
    pow_shield_secret "sentinel-config-suite-secret-0123456789";
HTTP
    server {
        %%TEST_SERVER%%
SERVER
        location / {
            pow_shield_limit 10 1m;
LOCATION
        }
    }
EOF

my $cases = Test::PowShield::ConfigCases->new($t, $template);

sub bad { $cases->bad(@_) }
sub good { $cases->good(@_) }

good(http => 'pow_shield_redis sentinel://127.0.0.1:26379,127.0.0.1:26380,127.0.0.1/mymaster;',
    'sentinel: three sentinels and a master name');
good(http => 'pow_shield_redis sentinel://app:s3cret@127.0.0.1/cache/2 timeout=100ms '
    . 'prefix=shield: sentinel_password=other;',
    'sentinel: the master\'s credentials and database, the sentinels\' password');
good(http => 'pow_shield_redis sentinels://127.0.0.1:26379/mymaster tls_verify=off;',
    'sentinels://: TLS options');

bad(http => 'pow_shield_redis sentinel://127.0.0.1:26379;', 'sentinel://127.0.0.1:26379',
    'sentinel: no master name', -says => qr/master-name/);
bad(http => 'pow_shield_redis sentinel://127.0.0.1:26379/my.master/x;',
    'sentinel://127.0.0.1:26379/my.master/x', 'sentinel: a database that is no number');
bad(http => 'pow_shield_redis sentinel://127.0.0.1:99999/m;', 'sentinel://127.0.0.1:99999/m',
    'sentinel: port 99999');
bad(http => 'pow_shield_redis sentinel://127.0.0.1,,127.0.0.2/m;',
    'sentinel://127.0.0.1,,127.0.0.2/m', 'sentinel: an empty host');
bad(http => 'pow_shield_redis sentinel://127.0.0.1/m cluster;', 'sentinel://127.0.0.1/m',
    'sentinel: with cluster', -says => qr/does not go with it/);
bad(http => 'pow_shield_redis sentinel://127.0.0.1/m tls_verify=off;', 'tls_verify=off',
    'sentinel://: TLS options need sentinels://');
bad(http => 'pow_shield_redis redis://127.0.0.1 sentinel_password=x;', 'sentinel_password=x',
    'redis://: sentinel_password= needs sentinel://');
bad(http => 'pow_shield_redis sentinel://127.0.0.1/m sentinel_password=;', 'sentinel_password=',
    'sentinel: an empty sentinel_password=');
bad(http => 'pow_shield_redis sentinel://:hunter2hunter2@127.0.0.1:0/m;', undef,
    'sentinel: a bad port after a password', -hide => 'hunter2hunter2');
bad(http => 'pow_shield_redis sentinel://no-such-host.invalid/m;',
    'sentinel://no-such-host.invalid/m', 'sentinel: a sentinel that does not resolve',
    -says => qr/host not found/);

###############################################################################

$t->done_testing;
