#!/usr/bin/perl

# Cluster-mode configuration (docs/directives.md): "nginx -t" rejects bad
# pow_shield_redis (sentinel:// too, slot=) and pow_shield_fail values with a message naming the
# directive, the bad value, file and line; valid values pass.  No Redis is
# needed: nginx -t does not connect.

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
    pow_shield_secret "cluster-config-suite-secret-0123456789";
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

sub config { $cases->config(@_) }
sub bad { $cases->bad(@_) }
sub good { $cases->good(@_) }

# pow_shield_redis: URL

bad(http => 'pow_shield_redis http://127.0.0.1:6379;', 'http://127.0.0.1:6379',
    'redis: scheme http://');
bad(http => 'pow_shield_redis 127.0.0.1:6379;', '127.0.0.1:6379',
    'redis: no scheme');
bad(http => 'pow_shield_redis rediss://;', 'rediss://', 'redis: rediss:// without a host');
bad(http => 'pow_shield_redis redis://127.0.0.1:99999;', 'redis://127.0.0.1:99999',
    'redis: port 99999');
bad(http => 'pow_shield_redis redis://127.0.0.1:0;', 'redis://127.0.0.1:0',
    'redis: port 0');
bad(http => 'pow_shield_redis redis://127.0.0.1:abc;', 'redis://127.0.0.1:abc',
    'redis: port "abc"');
bad(http => 'pow_shield_redis redis://127.0.0.1:;', 'redis://127.0.0.1:',
    'redis: empty port');
bad(http => 'pow_shield_redis redis://127.0.0.1:6379/abc;', 'redis://127.0.0.1:6379/abc',
    'redis: db "abc"');
bad(http => 'pow_shield_redis redis://127.0.0.1:6379/-1;', 'redis://127.0.0.1:6379/-1',
    'redis: db -1');
bad(http => 'pow_shield_redis redis://127.0.0.1:6379/99999999999;',
    'redis://127.0.0.1:6379/99999999999', 'redis: db out of range');
bad(http => 'pow_shield_redis redis://;', 'redis://', 'redis: no host');
bad(http => 'pow_shield_redis unix:relative.sock;', 'unix:relative.sock',
    'redis: unix: with a relative path');
bad(http => 'pow_shield_redis "";', '', 'redis: empty value');
bad(http => 'pow_shield_redis redis://:topsecret@127.0.0.1:99999;', undef,
    'redis: bad port after a password', -hide => 'topsecret');

# pow_shield_redis: options

bad(http => 'pow_shield_redis redis://127.0.0.1 foo=bar;', 'foo=bar',
    'redis: unknown option foo=bar');
bad(http => 'pow_shield_redis redis://127.0.0.1 fast;', 'fast',
    'redis: option without "="');
bad(http => 'pow_shield_redis redis://127.0.0.1 timeout=0;', 'timeout=0',
    'redis: timeout=0');
bad(http => 'pow_shield_redis redis://127.0.0.1 timeout=0ms;', 'timeout=0ms',
    'redis: timeout=0ms');
bad(http => 'pow_shield_redis redis://127.0.0.1 timeout=abc;', 'timeout=abc',
    'redis: timeout=abc');
bad(http => 'pow_shield_redis redis://127.0.0.1 timeout=-5ms;', 'timeout=-5ms',
    'redis: negative timeout');
bad(http => 'pow_shield_redis redis://127.0.0.1 connect_timeout=0;',
    'connect_timeout=0', 'redis: connect_timeout=0');
bad(http => 'pow_shield_redis redis://127.0.0.1 "prefix={x}";', 'prefix={x}',
    'redis: prefix with braces (would break the hash tag)');
bad(http => 'pow_shield_redis off timeout=1s;', 'timeout=1s',
    'redis: off with an option');

# pow_shield_redis: TLS options (files are checked by nginx -t)

my $dir = $t->testdir;
$t->write_file('garbage.pem', "not a certificate\n");
my $system_ca = -r '/etc/ssl/certs/ca-certificates.crt'
    ? '/etc/ssl/certs/ca-certificates.crt' : undef;

bad(http => 'pow_shield_redis redis://127.0.0.1 tls_verify=off;', 'tls_verify=off',
    'redis: tls_verify= on redis:// (plain)');
bad(http => 'pow_shield_redis redis://127.0.0.1 tls_ca=/etc/ssl/ca.pem;',
    'tls_ca=/etc/ssl/ca.pem', 'redis: tls_ca= on redis:// (plain)');
bad(http => 'pow_shield_redis unix:/tmp/r.sock tls_name=redis.test;',
    'tls_name=redis.test', 'redis: tls_name= on unix:');
bad(http => "pow_shield_redis rediss://127.0.0.1 tls_ca=$dir/missing.pem;",
    "tls_ca=$dir/missing.pem", 'redis: tls_ca= file missing');
bad(http => "pow_shield_redis rediss://127.0.0.1 tls_ca=$dir/garbage.pem;",
    "tls_ca=$dir/garbage.pem", 'redis: tls_ca= file not PEM certificates');
bad(http => "pow_shield_redis rediss://127.0.0.1 tls_verify=off tls_cert=$dir/garbage.pem;",
    "tls_cert=$dir/garbage.pem", 'redis: tls_cert= without tls_key=');
bad(http => "pow_shield_redis rediss://127.0.0.1 tls_verify=off tls_key=$dir/garbage.pem;",
    "tls_key=$dir/garbage.pem", 'redis: tls_key= without tls_cert=');
bad(http => "pow_shield_redis rediss://127.0.0.1 tls_verify=off"
    . " tls_cert=$dir/garbage.pem tls_key=$dir/missing.key;",
    "tls_key=$dir/missing.key", 'redis: tls_key= file missing');
bad(http => "pow_shield_redis rediss://127.0.0.1 tls_verify=off"
    . " tls_cert=$dir/garbage.pem tls_key=$dir/garbage.pem;",
    "tls_cert=$dir/garbage.pem", 'redis: client certificate not PEM');
bad(http => 'pow_shield_redis rediss://127.0.0.1 tls_verify=maybe;', 'tls_verify=maybe',
    'redis: tls_verify=maybe');
bad(http => 'pow_shield_redis rediss://127.0.0.1 "tls_name=a b";', 'tls_name=a b',
    'redis: tls_name= with a space');

good(http => 'pow_shield_redis rediss://127.0.0.1:6380 tls_verify=off;',
    'rediss:// with tls_verify=off');
good(http => 'pow_shield_redis rediss://127.0.0.1:6380 tls_verify=off tls_name=redis.test;',
    'rediss:// with tls_name=');
SKIP: {
    skip 'no system CA bundle', 2 unless $system_ca;
    good(http => 'pow_shield_redis rediss://127.0.0.1:6380;',
        'rediss:// verified against the system CA bundle by default');
    good(http => "pow_shield_redis rediss://127.0.0.1:6380 tls_ca=$system_ca;",
        'rediss:// with tls_ca=');
}

# pow_shield_redis: Redis Cluster seeds

bad(http => 'pow_shield_redis redis://127.0.0.1:7000,redis://127.0.0.1:7001;',
    'redis://127.0.0.1:7000,redis://127.0.0.1:7001', 'redis: several URLs without "cluster"');
bad(http => 'pow_shield_redis redis://127.0.0.1:7000/1 cluster;', 'redis://127.0.0.1:7000/1',
    'redis: cluster with a database other than 0');
bad(http => 'pow_shield_redis unix:/tmp/r.sock cluster;', 'unix:/tmp/r.sock',
    'redis: cluster over a unix socket');
bad(http => 'pow_shield_redis redis://127.0.0.1:7000,rediss://127.0.0.1:7001 cluster;',
    'redis://127.0.0.1:7000,rediss://127.0.0.1:7001', 'redis: cluster mixing redis:// and rediss://');
bad(http => 'pow_shield_redis redis://127.0.0.1:7000, cluster;', 'redis://127.0.0.1:7000,',
    'redis: an empty seed URL');

good(http => 'pow_shield_redis redis://127.0.0.1:7000,redis://127.0.0.1:7001 cluster;',
    'cluster with two seeds');
good(http => 'pow_shield_redis redis://:pw@127.0.0.1:7000 cluster timeout=100ms;',
    'cluster with one seed, a password and options');
good(http => 'pow_shield_redis rediss://127.0.0.1:7000,rediss://127.0.0.1:7001 cluster tls_verify=off;',
    'cluster over TLS');
good(http => 'pow_shield_redis redis://127.0.0.1:7000,redis://127.0.0.1:7001 cluster slot=net;',
    'cluster with slot=net (a client\'s keys in its network\'s slot)');
good(http => 'pow_shield_redis redis://127.0.0.1:7000 slot=net cluster;',
    'slot=net before cluster');
bad(http => 'pow_shield_redis redis://127.0.0.1:7000 slot=net;', 'slot=net',
    'redis: slot=net on one Redis (no slots)', -says => qr/add "cluster"/);
bad(http => 'pow_shield_redis redis://127.0.0.1:7000 cluster slot=24;', 'slot=24',
    'redis: slot=24', -says => qr/slot must be client or net/);

# key= counts in other hash tags than the client's: a Redis Cluster checks
# them with one call per slot (docs/operations.md, "Scrapers on many
# addresses"); one Redis and Sentinel in one call
good(location => 'pow_shield_limit 50 1m name=net key=$pow_shield_net;', 'key= with a Redis Cluster',
    HTTP => "            pow_shield_redis redis://127.0.0.1:7000,redis://127.0.0.1:7001 cluster;\n");
good(location => 'pow_shield_limit 50 1m name=net key=$pow_shield_net;', 'key= with one Redis',
    HTTP => "            pow_shield_redis redis://127.0.0.1:7000;\n");
good(location => 'pow_shield_limit 50 1m name=net key=$pow_shield_net;', 'key= with Sentinel',
    HTTP => "            pow_shield_redis sentinel://127.0.0.1:26379/m;\n");

# pow_shield_redis: context and duplicates

bad(server => 'pow_shield_redis redis://127.0.0.1;', undef,
    'redis: in a server block (http only)');
bad(location => 'pow_shield_redis redis://127.0.0.1;', undef,
    'redis: in a location (http only)');
bad(http => "pow_shield_redis redis://127.0.0.1;\n            pow_shield_redis redis://127.0.0.1;",
    undef, 'redis: duplicate');
bad(http => 'pow_shield_redis;', undef, 'redis: no argument');

good(http => 'pow_shield_redis redis://127.0.0.1;', 'redis://127.0.0.1');
good(http => 'pow_shield_redis redis://localhost:6380/15;', 'redis://localhost:6380/15');
good(http => 'pow_shield_redis redis://127.0.0.1:6379/0 timeout=200ms connect_timeout=1s prefix=app:;',
    'redis with every option');
good(http => 'pow_shield_redis redis://:pa%40ss@127.0.0.1;', ':password@ (percent-encoded)');
good(http => 'pow_shield_redis redis://user:pass@127.0.0.1:6379/2;', 'user:password@');
good(http => 'pow_shield_redis redis://[::1]:6379;', 'IPv6 address');
good(http => 'pow_shield_redis unix:/tmp/pow-shield-test-redis.sock;', 'unix:/path');
good(http => 'pow_shield_redis off;', 'off');
good(http => 'pow_shield_redis redis://127.0.0.1 timeout=1;', 'timeout=1 (seconds)');

# pow_shield_fail

bad(location => 'pow_shield_fail maybe;', 'maybe', 'fail: unknown policy');
bad(location => 'pow_shield_fail open trusted=$http_x_key;', 'trusted=$http_x_key',
    'fail: trusted= with open');
bad(location => 'pow_shield_fail local trusted=$http_x_key;', 'trusted=$http_x_key',
    'fail: trusted= with local');
bad(location => 'pow_shield_fail closed trusted=;', 'trusted=',
    'fail: trusted= without a value');
bad(location => 'pow_shield_fail closed foo=bar;', 'foo=bar',
    'fail: unknown option');
bad(location => 'pow_shield_fail closed trusted=$a trusted=$b;', undef,
    'fail: three arguments');
bad(location => 'pow_shield_fail;', undef, 'fail: no argument');
bad(location => "pow_shield_fail open;\n            pow_shield_fail closed;",
    undef, 'fail: duplicate in a location');

# an unknown variable is reported by nginx itself, like anywhere else (its
# "unknown variable" message carries no file:line)
{
    my ($file) = config(location =>
        'pow_shield_fail closed trusted=$no_such_variable_xyz;');
    my ($rc, $out) = $t->test_config($file);
    isnt($rc, 0, 'rejected: fail: trusted= with an unknown variable');
    like($out, qr/\[emerg\].*no_such_variable_xyz/,
        'fail: unknown variable: named');
}

good(location => 'pow_shield_fail local;', 'fail local');
good(location => 'pow_shield_fail open;', 'fail open');
good(location => 'pow_shield_fail closed;', 'fail closed');
good(location => 'pow_shield_fail closed trusted=$http_x_api_key;',
    'fail closed trusted=$var');
good(location => 'pow_shield_fail closed trusted=1;', 'fail closed trusted=1');
good(server => 'pow_shield_fail closed trusted=$http_x_api_key;', 'fail in server');
good(http => 'pow_shield_fail open;', 'fail in http');

# a cluster config loads (nginx -t) with both directives together

good(http => "pow_shield_redis redis://127.0.0.1:6379 timeout=50ms;\n"
    . "            pow_shield_fail closed trusted=\$http_x_api_key;",
    'pow_shield_redis with pow_shield_fail at http level');

# pow_shield_redis sentinel://...: the URL form and the options that go
# with it; a refusal never shows a password

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
