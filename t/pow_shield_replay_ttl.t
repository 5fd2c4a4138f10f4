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

use Test::More;
use Test::PowShield qw(:pow :redis http_conf);
use Test::PowShield::Modes;

###############################################################################

my $conf = http_conf(<<'EOF');
    pow_shield_secret "replay-ttl-suite-secret-0123456789abcdef";
    %%REDIS%%

    server {
        %%TEST_SERVER%%

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
EOF

###############################################################################

sub get {
    my ($t, $where, %h) = @_;
    return $t->http_get("/$where/data.json", 'X-Client' => 'spender', %h);
}

# spends a challenge at /short/; returns the solution's headers
sub spend_short {
    my ($t) = @_;
    get($t, 'short');
    my %sol = solution(get($t, 'short'));
    is(get($t, 'short', %sol)->status, 200, 'solution spent at the 2 s location');
    return %sol;
}

Test::PowShield::Modes->each_mode($conf,
    files => { map { ("html/$_/data.json" => qq({"ok":true}\n)) } qw(short long) },
    sub {
    my ($m) = @_;
    my $t = $m->node(1);
    my %sol = spend_short($t);

    # past the short TTL: expired there, still valid where the TTL is an hour
    sleep 3;

    if ($m->cluster) {
        my $ttl = $m->redis->cmd('PTTL', spent_key($sol{'X-PoW-Challenge'})) // -9;
        ok($ttl > 0 && $ttl <= 4000,
            "$m: the spent key lives until exp + 5 s (PTTL $ttl ms, 3 s after)");
    }
    is(get($t, 'short', %sol)->status, 410,
        "$m: premise: 3 s later the token has expired at the 2 s location");
    is(get($t, 'long', %sol)->status, 410,
        "$m: replayed at the 1 h location after 3 s: expired by its exp");
});

###############################################################################

Test::PowShield::Modes->done_testing;
