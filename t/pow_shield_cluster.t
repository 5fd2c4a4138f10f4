#!/usr/bin/perl

# Cluster mode (docs/operations.md, "Running several nodes"; docs/directives.md, pow_shield_redis): two
# nginx nodes sharing one Redis enforce one global limit per client, accept
# each other's challenges and refuse a solution spent on the other node; the
# window slides (a request leaves it exactly one window after it was
# counted); a flushed script cache is reloaded (EVALSHA -> NOSCRIPT -> EVAL);
# reload and graceful stop keep working with open Redis connections.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use POSIX qw(ceil);
use Test::More;
use Test::PowShield qw(:pow :util :redis);
use Test::PowShield::Modes;

###############################################################################

my $SECRET = 'cluster-suite-secret-0123456789abcdef';

my $conf = http_conf(<<"EOF", workers => 2);
    pow_shield_secret "$SECRET";
    pow_shield_redis redis://127.0.0.1:%%REDIS_PORT%% timeout=1s;

    # a cache manager process: it serves no requests, so it holds no Redis
    # connection
    CACHE

    server {
        %%TEST_SERVER%%

        add_header X-Result \$pow_shield_result always;

        pow_shield_key \$http_x_client;
        pow_shield_difficulty 1;
        # This suite is about the limiter, not the circuit breaker.
        pow_shield_strikes off;
        pow_shield_challenge_ttl 30s;

        location /api/ {
            pow_shield_limit 3 1h;
        }

        location /slide/ {
            pow_shield_limit 2 2s;
        }

        location /plain/ {
        }
    }
EOF

my $cache = Test::PowShield->has_module('proxy')
    ? 'proxy_cache_path %%TESTDIR%%/cache keys_zone=pscache:1m;' : '';
$conf =~ s/CACHE/$cache/;

my %files = map { ("html/$_/data.json" => qq({"dir":"$_"}\n)) } qw(api slide plain);
my ($n1, $n2) = Test::PowShield::Modes->cluster_only($conf, nodes => 2,
    files => \%files)->nodes;

###############################################################################

sub get {
    my ($t, $client, $uri, %h) = @_;
    return $t->http_get($uri // '/api/data.json', 'X-Client' => $client, %h);
}

sub wkey {
    my ($client, $n, $ms) = @_;
    return client_key($client, 'w', $n, $ms);
}

sub redis_ms {
    my $t = $n1->redis_cmd('TIME') or return undef;
    return $t->[0] * 1000 + int($t->[1] / 1000);
}

# Redis connections of the nodes' workers (the harness's own connection
# runs CLIENT LIST)
sub worker_conns {
    my $list = $n1->redis_cmd('CLIENT', 'LIST') // '';
    return scalar grep { !/cmd=client\|list/ } split /\n/, $list;
}

# each worker opens one persistent connection when it starts

ok(eventually(5, sub { worker_conns() >= 4 }),
    '2 nodes x 2 workers: Redis connections opened before any request');
Time::HiRes::sleep(0.3);
is(worker_conns(), 4,
    '2 nodes x 2 workers: 4 Redis connections (none from cache managers)')
    or diag($n1->redis_cmd('CLIENT', 'LIST'));

# one global limit: 3 requests per hour, alternating between the nodes

my @r = (get($n1, 'g'), get($n2, 'g'), get($n1, 'g'), get($n2, 'g'), get($n1, 'g'));
is(join(' ', map { $_->status // 'none' } @r), '200 200 200 429 429',
    'limit 3 over two nodes: 3 pass in all, then 429 on both nodes');
is(join(' ', map { $_->header('X-RateLimit-Remaining') // '-' } @r[0 .. 2]),
    '2 1 0', 'Remaining counts down across nodes');
is($n1->redis_cmd('ZCARD', wkey('g', 3, 3600000)), 3,
    'the sorted set holds 3 entries (one per admitted request)');

# a challenge issued by one node is accepted by the other; replay -> 409

my $challenge = $r[4];      # from node A
ok($challenge->header('X-PoW-Challenge'), 'node A issued a challenge');
my %sol = solution($challenge);
my $r = get($n2, 'g', undef, %sol);
is($r->status, 200, 'challenge of node A solved on node B: 200');
is($r->header('X-Result'), 'solved', 'node B: $pow_shield_result solved');

$r = get($n1, 'g', undef, %sol);
is($r->status, 409, 'the same solution replayed on node A: 409');
is(($r->json // {})->{error}, 'Challenge already spent',
    '409: "Challenge already spent"');
ok($r->header('X-PoW-Challenge'), '409 carries a fresh challenge');

$r = get($n2, 'g', undef, %sol);
is($r->status, 409, 'replayed on node B again: 409');

# the other way round: issued by B, spent on B, replayed on A

my %sol2 = solution(get($n2, 'g'));
is(get($n2, 'g', undef, %sol2)->status, 200, 'challenge of node B solved on B');
is(get($n1, 'g', undef, %sol2)->status, 409, '... replayed on node A: 409');

# a token forged with the shared secret verifies on either node (they share
# the key); one with another secret does not

{
    my $p = { ip => '127.0.0.1', ts => now_ms(), difficulty => 1,
        salt => 'abcdef0123456789abcdef0123456789' };
    my $tok = forge_token($SECRET, $p);
    my %h = ('X-PoW-Challenge' => $tok,
        'X-PoW-Nonce' => solve($p->{salt}, 1));
    is(get($n2, 'g', undef, %h)->status, 200,
        'token signed with the shared secret: accepted');
    is(get($n1, 'g', undef, %h)->status, 409, '... and spent cluster-wide');

    $tok = forge_token('another-secret-0123456789abcdef-xyz', $p);
    is(get($n1, 'g', undef, 'X-PoW-Challenge' => $tok,
            'X-PoW-Nonce' => $h{'X-PoW-Nonce'})->status, 403,
        'token signed with another secret: 403');
}

# the spent challenge is a key of its own, kept while any location could
# accept it: the longest challenge ttl (30 s) plus the 5 s clock allowance

my $spent = spent_key($sol{'X-PoW-Challenge'});
is($n1->redis_cmd('EXISTS', $spent), 1, "spent challenge stored as $spent");
my $ttl = $n1->redis_cmd('TTL', $spent) // -9;
ok($ttl > 30 && $ttl <= 35,
    "spent key outlives the challenge by the clock allowance (TTL $ttl)");

# the sliding window: limit 2 per 2 s.  A is counted at sA, B about 1 s
# later; C is refused while both are in.  A leaves the window exactly at
# sA + 2000 ms (Redis clock): just before it a request is still 429, just
# after it one request passes, and the next is 429 because B is still in.

SKIP: {
    my $key = wkey('s', 2, 2000);
    my $ra = get($n1, 's', '/slide/data.json');
    is($ra->status, 200, 'sliding: A (node A) passes');
    my $z = $n1->redis_cmd('ZRANGE', $key, 0, -1, 'WITHSCORES') || [];
    my $sa = $z->[1];
    skip 'no score for A in Redis', 10 unless defined $sa;

    # B about 1 s after A
    Time::HiRes::sleep(0.05) while (redis_ms() // 0) < $sa + 1000;
    my $rb = get($n2, 's', '/slide/data.json');
    is($rb->status, 200, 'sliding: B (node B, ~1 s later) passes');
    $z = $n1->redis_cmd('ZRANGE', $key, 0, -1, 'WITHSCORES') || [];
    my $sb = $z->[3] // 0;
    ok($sb >= $sa + 1000, 'sliding: B was counted ~1 s after A');

    my $rc = get($n1, 's', '/slide/data.json');
    is($rc->status, 429, 'sliding: C while A and B are in: 429');
    my $reset = $rc->header('X-RateLimit-Reset') // 0;
    my $want = ceil(($sa + 2000) / 1000);
    ok(abs($reset - $want) <= 1,
        'sliding: X-RateLimit-Reset is when A leaves (score + window)')
        or diag("reset $reset, A's score $sa");
    my $ra_s = $rc->header('Retry-After') // 0;
    ok($ra_s >= 1 && $ra_s <= 2, "sliding: Retry-After until A leaves ($ra_s)");

    # 400 ms before A leaves: still 429 (a fixed 2 s window starting at A or
    # a leaky bucket might already admit here)
    Time::HiRes::sleep(0.02) while (redis_ms() // 0) < $sa + 1600;
    my $early = get($n2, 's', '/slide/data.json');
    is($early->status, 429, 'sliding: shortly before A leaves: 429');

    # just after A leaves, before B does
    Time::HiRes::sleep(0.01) while (redis_ms() // 0) < $sa + 2030;
    my $rd = get($n2, 's', '/slide/data.json');
    is($rd->status, 200, 'sliding: just after A left the window: one passes');
    my $re = get($n1, 's', '/slide/data.json');
    is($re->status, 429, 'sliding: the next is 429 (B is still in)');
    ok((redis_ms() // 0) < $sb + 2000, 'sliding: (premise) B had not left yet');
    my $pttl = $n1->redis_cmd('PTTL', $key) // -9;
    ok($pttl > 1000 && $pttl <= 2000,
        "sliding: the key expires one window after its newest entry ($pttl ms)");
}

# SCRIPT FLUSH while running: requests still work and are counted
# (EVALSHA answers NOSCRIPT, the module resends EVAL), and that is not a
# Redis failure

sub calls { $n1->redis->calls(@_) }

ok(calls('evalsha') > 0, 'the script runs with EVALSHA');
my $evals = calls('eval');
my $before_a = $n1->redis_unavailable_count;
my $before_b = $n2->redis_unavailable_count;
is($n1->redis_cmd('SCRIPT', 'FLUSH'), 'OK', 'SCRIPT FLUSH');
@r = (get($n1, 'f'), get($n2, 'f'), get($n1, 'f'), get($n2, 'f'));
is(join(' ', map { $_->status // 'none' } @r), '200 200 200 429',
    'after SCRIPT FLUSH: counted as before on both nodes');
is($r[2]->header('X-RateLimit-Remaining'), 0, 'after SCRIPT FLUSH: Remaining 0');
is($n1->redis_cmd('ZCARD', wkey('f', 3, 3600000)), 3,
    'after SCRIPT FLUSH: 3 entries in Redis');
ok(calls('eval') > $evals, 'after NOSCRIPT the module sent EVAL');
is($n1->redis_unavailable_count + $n2->redis_unavailable_count, $before_a + $before_b,
    'NOSCRIPT is not logged as Redis being unavailable');

# the script is cached again: later requests work without a reload
is($n1->redis_cmd('SCRIPT', 'FLUSH'), 'OK', 'SCRIPT FLUSH again');
is(get($n2, 'f2')->status, 200, 'after a second SCRIPT FLUSH: 200');
is($n1->redis_cmd('ZCARD', wkey('f2', 3, 3600000)), 1, '... and counted');

is(worker_conns(), 4, 'after many requests: still 4 connections (persistent)');

# an unshielded location does not talk to Redis and has no headers

$r = get($n1, 'plain', '/plain/data.json');
is($r->status, 200, 'unshielded location: 200');
ok(!$r->has_header('X-RateLimit-Limit'), 'unshielded location: no headers');
is($n1->redis_cmd('EXISTS', wkey('plain', 3, 3600000)), 0,
    'unshielded location: nothing in Redis');

# reload keeps working in cluster mode: the count lives in Redis

@r = (get($n1, 'rl'), get($n2, 'rl'));
is(join(' ', map { $_->status // 'none' } @r), '200 200', 'before reload: 2 of 3');
ok($n1->reload, 'node A reloaded');
$r = get($n1, 'rl');
is($r->status, 200, 'after reload: the 3rd request passes');
is($r->header('X-RateLimit-Remaining'), 0, 'after reload: the count went on');
is(get($n1, 'rl')->status, 429, 'after reload: the 4th is 429');
is($n1->redis_cmd('ZCARD', wkey('rl', 3, 3600000)), 3,
    'after reload: still 3 entries in Redis');
is($n1->redis_unavailable_count, $before_a,
    'reload: no "unavailable" line (old workers closed, new ones connected)');
ok(eventually(5, sub { worker_conns() == 4 }),
    'after reload: 4 connections again (old workers closed theirs)')
    or diag(worker_conns());

# graceful stop of node B (QUIT) with open Redis connections; node A keeps
# going; the error.log checks at the end cover [alert]s of both nodes

$n2->stop;
ok($n2->stopped_gracefully, 'node B exited on QUIT by itself');
ok(!grep({ /\[alert\]|\[crit\]/ } $n2->error_log_lines),
    'node B stopped (QUIT) with an open Redis connection: no alert, no crit');
is(get($n1, 'after-b')->status, 200, 'node A still serves after B stopped');
ok(eventually(5, sub { worker_conns() == 2 }),
    'node B closed its Redis connections on exit');

###############################################################################

$n1->done_testing;
