#!/usr/bin/perl

# How long a token is accepted and its spent record remembered
# (docs/protocol.md 4): until the token's signed exp (plus the 5 s clock
# allowance for the record), whatever the TTL of the location that verifies
# it.  A token issued where the TTL is 2 s is expired at a location whose
# TTL is an hour, and its spent record lives 2 s + 5 s.  In local mode (the
# zone) and in cluster mode (the Redis key's TTL).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Digest::SHA qw(sha256_hex);
use Test::More;
use Test::PowShield qw(:pow);
use Test::PowShield::Redis;

###############################################################################

my $conf = <<'EOF';
%%TEST_GLOBALS%%

events {
}

http {
    %%TEST_GLOBALS_HTTP%%

    default_type application/json;

    pow_shield_secret "replay-ttl-suite-secret-0123456789abcdef";
    REDIS

    server {
        listen 127.0.0.1:%%PORT_8080%%;
        server_name localhost;

        root %%TESTDIR%%/html;

        pow_shield_key $http_x_client;
        pow_shield_difficulty 1;

        # the same limit, so the same bucket: a client over the limit at
        # one location is over it at the other

        location /short/ {
            pow_shield_limit 1 1d;
            pow_shield_challenge_ttl 2s;
        }

        location /long/ {
            pow_shield_limit 1 1d;
            pow_shield_challenge_ttl 1h;
        }
    }
}
EOF

my $local = Test::PowShield->new;
(my $c = $conf) =~ s/REDIS//;
$local->write_file_expand('nginx.conf', $c);

my $cluster;
if (Test::PowShield::Redis::available()) {
    $cluster = Test::PowShield->new;
    $cluster->run_redis;
    ($c = $conf) =~ s/REDIS/pow_shield_redis redis:\/\/127.0.0.1:%%REDIS_PORT%%;/;
    $cluster->write_file_expand('nginx.conf', $c);
}

for my $t (grep { defined } $local, $cluster) {
    $t->write_file("html/$_/data.json", qq({"ok":true}\n)) for qw(short long);
    $t->run;
}

###############################################################################

sub get {
    my ($t, $where, %h) = @_;
    return $t->http_get("/$where/data.json", 'X-Client' => 'spender', %h);
}

# spends a challenge at /short/; returns the solution's headers
sub spend_short {
    my ($t) = @_;
    get($t, 'short');
    my $token = get($t, 'short')->header('X-PoW-Challenge') // '';
    my $p = (decode_token($token) || {})->{payload} || {};
    my %sol = ('X-PoW-Challenge' => $token,
        'X-PoW-Nonce' => solve($p->{salt} // '', 1));
    is(get($t, 'short', %sol)->status, 200, 'solution spent at the 2 s location');
    return %sol;
}

my %sol = spend_short($local);
my %csol = $cluster ? spend_short($cluster) : ();

# past the short TTL: expired there, still valid where the TTL is an hour
sleep 3;

is(get($local, 'short', %sol)->status, 410,
    'premise: 3 s later the token has expired at the 2 s location');
is(get($local, 'long', %sol)->status, 410,
    'local: replayed at the 1 h location after 3 s: expired by its exp');

SKIP: {
    skip 'redis-server not found', 2 unless $cluster;

    my $key = 'pow:spent:{' . sha256_hex($csol{'X-PoW-Challenge'}) . '}';
    my $ttl = $cluster->redis_cmd('PTTL', $key) // -9;
    ok($ttl > 0 && $ttl <= 4000,
        "cluster: the spent key lives until exp + 5 s (PTTL $ttl ms, 3 s after)");
    is(get($cluster, 'long', %csol)->status, 410,
        'cluster: replayed at the 1 h location after 3 s: expired by its exp');
}

###############################################################################

$local->done_testing;
