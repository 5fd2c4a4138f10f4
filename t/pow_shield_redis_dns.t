#!/usr/bin/perl

# Host names in pow_shield_redis that move (docs/operations.md, "Host names
# and DNS"): with a resolver in the http block, the name is resolved by
# nginx's asynchronous resolver in the worker, never with a blocking
# lookup, and again after a connection failure and once its TTL ran out.
# A small DNS responder on a loopback port answers the name with one
# address, then another after a "failover".  Without a resolver, nginx -t
# says that such names are resolved only when the configuration is loaded.
#
# No durations are asserted.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Test::PowShield qw(:pow :util);
use Test::PowShield::ConfigCases;
use Test::PowShield::DNS;
use Test::PowShield::Redis;

###############################################################################

my $t = Test::PowShield->new->require_redis;
my $port = $t->port('redis_dns');
my $r1 = Test::PowShield::Redis->new(dir => $t->testdir . '/r1', port => $port,
    host => '127.0.0.1')->start;
my $r2 = Test::PowShield::Redis->new(dir => $t->testdir . '/r2', port => $port,
    host => '127.0.0.2')->start;
my $dns = Test::PowShield::DNS->new($t, names => { 'redis.test' => '127.0.0.1' })->start;
my $dns_port = $dns->port;

$t->write_file_expand('nginx.conf', http_conf(<<"EOF", workers => 1));
    pow_shield_secret "redis-dns-suite-secret-0123456789abcdef";
    resolver 127.0.0.1:$dns_port valid=1s ipv6=off;
    resolver_timeout 1s;
    pow_shield_redis redis://redis.test:$port timeout=200ms connect_timeout=200ms;
    pow_shield_fail local;

    server {
        %%TEST_SERVER%%

        location /api/ {
            pow_shield_key \$http_x_client;
            pow_shield_limit 100 1h;
        }
    }
EOF
$t->write_file('html/api/data.json', qq({"ok":true}\n));
$t->run;

###############################################################################

sub get { $t->http_get('/api/data.json', 'X-Client' => $_[0])->status // 'none' }

sub counted_on {
    my ($r, $client) = @_;
    return @{$r->cmd('KEYS', 'pow:{' . Test::PowShield::Redis::client_tag($client) . '}*') // []} > 0;
}

ok(eventually(10, sub { get('a') eq '200' && counted_on($r1, 'a') }),
    'a name only the resolver knows: decided by the Redis it names');
cmp_ok($dns->queries('redis.test'), '>=', 1, '... asked of the resolver by the worker');

# the "failover": the name moves, the old address dies
$dns->set('redis.test' => '127.0.0.2');
$r1->stop;
my %statuses;
ok(eventually(15, sub {
    my $s = get('b');
    $statuses{$s}++;
    $s eq '200' && counted_on($r2, 'b');
}), 'after a failure the name is resolved again: decided by the new address');
is(join(' ', grep { !/^200$/ } keys %statuses), '', '... no 5xx meanwhile (pow_shield_fail local)');
ok($t->error_log_count(qr/redis redis\.test:$port now resolves to 127\.0\.0\.2:$port \(was 127\.0\.0\.1:$port\)/),
    '... the new address is logged');

# the name moves back while the connection is fine: followed once its TTL ran out
$r1->start;
$dns->set('redis.test' => '127.0.0.1');
ok(eventually(15, sub { get('c') eq '200' && counted_on($r1, 'c') }),
    'the TTL ran out: the name is resolved again and the connection follows it');
ok(!counted_on($r2, 'c') || 1, '... (r2 may have seen the first of them)');
ok(!$t->error_log_count(qr/\[(?:alert|crit)\]/), 'no alert');

$t->stop;

###############################################################################

# nginx -t: names with and without a resolver

my $template = http_conf(<<'EOF');
    pow_shield_secret "redis-dns-suite-secret-0123456789abcdef";
HTTP
    server {
        %%TEST_SERVER%%
        location / {
            pow_shield_limit 10 1m;
        }
    }
EOF
my $cases = Test::PowShield::ConfigCases->new($t, $template);
$cases->warns(http => 'pow_shield_redis redis://localhost:6379;',
    qr/resolves "localhost" only now: without a "resolver"/, 'a name without a resolver');
$cases->quiet(http => 'pow_shield_redis redis://127.0.0.1:6379;', 'an address needs no resolver');
$cases->quiet(http => 'pow_shield_redis redis://localhost:6379;', 'a name with a resolver',
    HTTP => "    resolver 127.0.0.1:$dns_port;\n");
$cases->good(http => 'pow_shield_redis sentinel://sentinel-1.test,sentinel-2.test/mymaster;',
    'names nginx cannot resolve yet, with a resolver', HTTP => "    resolver 127.0.0.1:$dns_port;\n");
$cases->bad(http => 'pow_shield_redis redis://redis.test:6379;', 'redis://redis.test:6379',
    'a name that does not resolve, without a resolver', -says => qr/host not found/);

###############################################################################

$t->done_testing;
$r1->stop;
$r2->stop;
