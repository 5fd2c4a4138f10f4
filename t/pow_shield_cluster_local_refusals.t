#!/usr/bin/perl

# Cluster mode's local refusals (docs/operations.md, "What is decided
# where"): a client Redis refused until T is refused by the node itself
# until T, with the headers and difficulty Redis would have sent; each such
# refusal is a strike, counted at once on the node and sent to Redis in
# batches, exactly (none lost, none counted twice, through a frozen Redis);
# a client blocked on one node is blocked on the others soon after; the
# shared limit stays exact; and the node never refuses past T.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Test::PowShield qw(:pow :util :redis);
use Test::PowShield::Modes;
use Test::PowShield::Response;

###############################################################################

my $conf = http_conf(<<'EOF', workers => 1);
    pow_shield_secret "cluster-local-refusals-secret-0123456";
    pow_shield_redis redis://127.0.0.1:%%REDIS_PORT%% timeout=500ms;

    server {
        %%TEST_SERVER%%

        add_header X-Result $pow_shield_result always;
        pow_shield_key $http_x_client;
        pow_shield_difficulty 1;

        # a flood that never blocks: every 429 is a strike
        location /api/ {
            pow_shield_limit 5 1h;
            pow_shield_strikes 1000000 1h;
        }

        # the frozen-Redis flood: while Redis is unavailable nothing is
        # admitted (closed: 503), so every 429 is a strike for Redis
        location /frozen/ {
            pow_shield_limit 5 1h;
            pow_shield_strikes 1000000 1h;
            pow_shield_fail closed;
        }

        location /block/ {
            pow_shield_limit 1 1h;
            pow_shield_strikes 5 1h;
        }

        location /rise/ {
            pow_shield_limit 1 1h;
            pow_shield_strikes 1000 1h;
            pow_shield_difficulty 1 max=8;
        }

        location /co/ {
            pow_shield_limit 20 1h;
            pow_shield_strikes 1000000 1h;
        }

        location /slide/ {
            pow_shield_limit 1 2s;
            pow_shield_strikes off;
        }

        # no strikes, a fixed price: Redis has nothing to learn of a 429
        location /quiet/ {
            pow_shield_limit 1 1h;
            pow_shield_strikes off;
        }

        # no strikes, a rising price: Redis counts the refusals
        location /quietrise/ {
            pow_shield_limit 1 1h;
            pow_shield_strikes off;
            pow_shield_difficulty 1 max=8;
        }
    }
EOF

my %files = map { ("html/$_/data.json" => qq({"dir":"$_"}\n)) } qw(api frozen block rise slide co quiet quietrise);
my ($n1, $n2) = Test::PowShield::Modes->cluster_only($conf, nodes => 2,
    files => \%files)->nodes;

###############################################################################

sub get {
    my ($t, $client, $dir, %h) = @_;
    return $t->http_get("/$dir/data.json", 'X-Client' => $client, %h);
}

# Every request at once (at_once): each entry of @reqs is [node, client,
# dir]; a code reference first runs once every request is written.
sub burst {
    my (@reqs) = @_;
    my @written = ref $reqs[0] eq 'CODE' ? (shift @reqs) : ();
    return at_once(@written, map {
        my ($t, $client, $dir) = @$_;
        [$t, "GET /$dir/data.json HTTP/1.0\r\nHost: localhost\r\nX-Client: $client\r\n\r\n"];
    } @reqs);
}

sub count {
    my ($want, @rs) = @_;
    return scalar grep { ($_->status // 'none') eq $want } @rs;
}

sub redis_int { $n1->redis_cmd('GET', $_[0]) // 0 }

sub script_calls { $n1->redis->calls(qw(evalsha eval)) }

# window-script calls only (each counts the client's log first; the batch
# script reads no sorted set)
sub window_calls { $n1->redis->calls(qw(zcard)) }

sub redis_ms {
    my $t = $n1->redis_cmd('TIME') or return 0;
    return $t->[0] * 1000 + int($t->[1] / 1000);
}

# one client floods both nodes over its limit: 5 pass in all, every other
# request is a 429, and Redis ends up with exactly one strike (and one
# refusal) per 429 the nodes sent

{
    my @rs;
    push @rs, burst(map { [$_ % 2 ? $n1 : $n2, 'flood', 'api'] } 1 .. 40) for 1 .. 4;
    push @rs, get($_ % 2 ? $n1 : $n2, 'flood', 'api') for 1 .. 40;
    is(count(200, @rs), 5, 'a flood on two nodes: exactly the limit (5) admitted');
    my $refused = count(429, @rs);
    is($refused, @rs - 5, 'every other request of the flood: 429')
        or diag(statuses(@rs));
    ok(eventually(10, sub { redis_int(client_key('flood', 's')) == $refused }),
        "the strikes in Redis: exactly the $refused 429s sent")
        or diag('strikes in Redis: ' . redis_int(client_key('flood', 's')));
    is(redis_int(client_key('flood', 'u')), $refused, '... all of them unpaid strikes');
    is(redis_int(client_key('flood', 'o', 5, 3600000)), $refused,
        '... and as many refusals in the window (rising difficulty)');
    Time::HiRes::sleep(0.3);
    is(redis_int(client_key('flood', 's')), $refused, '... and no more later');
}

# the same with Redis frozen for 2 s in the middle of the flood (replies
# time out, batches on their way are lost and sent again, the connections
# are dropped and made again): each strike reaches Redis once. (Once a
# node finds Redis unavailable, pow_shield_fail decides: closed here, so
# that no fallback bucket admits or strikes.)

{
    my @rs = map { get($_ % 2 ? $n1 : $n2, 'frozen', 'frozen') } 1 .. 10;
    $n1->pause_redis;
    my $until = Time::HiRes::time() + 2;
    while (Time::HiRes::time() < $until) {
        push @rs, get($_ % 2 ? $n1 : $n2, 'frozen', 'frozen') for 1 .. 10;
    }
    $n1->resume_redis;
    # (Within 3 s of a node's return an unpaid 429 is no strike: the
    # other nodes may still be writing the payments they took meanwhile.)
    my $struck = count(429, @rs);
    push @rs, get($_ % 2 ? $n1 : $n2, 'frozen', 'frozen') for 1 .. 20;
    is(count(200, @rs), 5, 'Redis frozen 2 s mid-flood: still exactly 5 admitted');
    my $refused = count(429, @rs);
    ok(count(503, @rs) > 0, '... Redis unavailable: fail closed (' . count(503, @rs) . ' 503s)');
    is($refused + count(503, @rs), @rs - 5, '... and every other request a 429 or 503')
        or diag(statuses(@rs));
    ok(eventually(10, sub { redis_int(client_key('frozen', 's')) == $struck }),
        "Redis frozen 2 s mid-flood: the strikes in Redis are the $struck 429s sent "
        . 'before it resumed') or diag('strikes in Redis: ' . redis_int(client_key('frozen', 's')));
    Time::HiRes::sleep(0.3);
    is(redis_int(client_key('frozen', 's')), $struck,
        '... none counted twice (a batch resent after a lost reply is applied once)');
}

# (Both nodes strike again: within 3 s of a node's return from the freeze
# above an unpaid 429 is no strike. Polled with fresh clients, no sleep.)
for my $t ($n1, $n2) {
    my $k = 0;
    ok(eventually(10, sub {
            my $c = 'again-' . $t->port(8080) . '-' . $k++;
            get($t, $c, 'block') for 1 .. 2;
            redis_int(client_key($c, 's')) == 1;
        }), 'after the freeze, a node strikes again');
}

# a client flooding node A is blocked on node B soon after: the strike that
# reaches the threshold on A sends A's batch at once

{
    my @rs = map { get($n1, 'blk', 'block') } 1 .. 7;
    is(statuses(@rs), '200 429 429 429 429 429 403',
        'node A: 5 strikes (one from Redis, 4 decided here), then blocked at once');
    my $t0 = Time::HiRes::time();
    ok(eventually(5, sub { (get($n2, 'blk', 'block')->status // 0) == 403 }),
        'a client blocked on node A is blocked on node B (polled, 5 s bound)');
    note(sprintf 'blocked on node B after %.0f ms', (Time::HiRes::time() - $t0) * 1000);
    is(redis_int(client_key('blk', 's')), 5, 'Redis counts the 5 strikes');
}

# the local 429 carries what Redis would have sent: limit headers, and the
# difficulty rising with the client's refusals and strikes (base 1:
# 1 + floor(log2(1 + over)) + floor(strikes / 2), over = strikes = k at the
# k-th refusal)

{
    my @rs = map { get($n1, 'rise', 'rise') } 1 .. 7;
    is(statuses(@rs), '200 429 429 429 429 429 429', 'rise: 1 admitted, then 429');
    my @d = map { (decode_token($_->header('X-PoW-Challenge')) || {})->{payload}{difficulty} // '-' }
        @rs[1 .. 6];
    is("@d", '2 3 4 5 5 6',
        'rising difficulty: the same steps whether Redis or the node refused');
    my ($redis, $local) = @rs[1, 2];
    for my $h (qw(X-RateLimit-Limit X-RateLimit-Remaining RateLimit-Policy)) {
        is($local->header($h), $redis->header($h), "local 429: $h as Redis sent it");
    }
    ok(abs(($local->header('X-RateLimit-Reset') // 0) - ($redis->header('X-RateLimit-Reset') // -9)) <= 1,
        'local 429: X-RateLimit-Reset as Redis sent it');
    ok(abs(($local->header('Retry-After') // 0) - ($redis->header('Retry-After') // -9)) <= 1,
        'local 429: Retry-After as Redis sent it');
    like($local->header('RateLimit') // '', qr/^"pow-shield";r=0;t=\d+$/, 'local 429: RateLimit r=0');
}

# never refused past T: limit 1 per 2 s; A admitted at sA (Redis clock), B
# refused by Redis, then the node refuses until A leaves the window
# (sA + 2000) and not after

SKIP: {
    is(get($n1, 'sl', 'slide')->status, 200, 'slide: A admitted');
    my $z = $n1->redis_cmd('ZRANGE', client_key('sl', 'w', 1, 2000), 0, 0, 'WITHSCORES') || [];
    my $sa = $z->[1];
    skip 'no score for A in Redis', 5 unless defined $sa;
    is(get($n1, 'sl', 'slide')->status, 429, 'slide: B refused by Redis');
    # the client keeps trying (every 50 ms): the node refuses it (no
    # strikes, a fixed price: nothing Redis hears of changes the answer
    # before T, so the node never asks again)
    my @r;
    while (redis_ms() < $sa + 1850) {
        push @r, get($n1, 'sl', 'slide');
        Time::HiRes::sleep(0.05);
    }
    is(join(' ', grep { $_ ne '429' } map { $_->status // 'none' } @r), '',
        'slide: refused until shortly before T');
    my $calls = window_calls();
    Time::HiRes::sleep(0.005) while redis_ms() < $sa + 1900;
    is(get($n1, 'sl', 'slide')->status, 429, 'slide: 100 ms before T: refused');
    is(window_calls(), $calls, '... by the node, without asking Redis');
    Time::HiRes::sleep(0.01) while redis_ms() < $sa + 2030;
    my $r = get($n1, 'sl', 'slide');
    is($r->status, 200, 'slide: just after T: admitted (the node never refuses past T)')
        or diag("Redis ms " . redis_ms() . ", A at $sa");
}

# without strikes or a rising price a local refusal costs Redis nothing: no
# batch; with a rising price its count reaches Redis (the price on other
# nodes rises with it)

{
    my @rs = map { get($n1, 'q', 'quiet') } 1 .. 2;
    is(statuses(@rs), '200 429', 'quiet: 1 admitted, then refused by Redis');
    my $calls = script_calls();
    push @rs, get($n1, 'q', 'quiet') for 1 .. 30;
    Time::HiRes::sleep(0.3);
    is(count(429, @rs[2 .. $#rs]), 30, 'quiet: 30 more refused by the node');
    is(script_calls() - $calls, 0, 'quiet: without strikes or a rising price: no script call');
    is(redis_int(client_key('q', 'o', 1, 3600000)), 1,
        '... Redis counts only the refusal it decided');

    # a flush reaches the node's refusals within 2 s, not at T (an hour)
    is(get($n1, 'qf', 'quiet')->status, 200, 'flushed: 1 admitted');
    is(get($n1, 'qf', 'quiet')->status, 429, 'flushed: then refused by Redis');
    is(get($n1, 'qf', 'quiet')->status, 429, 'flushed: and by the node');
    $n1->redis_cmd('FLUSHALL');
    ok(eventually(10, sub { get($n1, 'qf', 'quiet')->status == 200 }),
        'flushed: after FLUSHALL the node asks Redis again and admits the client');

    @rs = map { get($n1, 'qr', 'quietrise') } 1 .. 32;
    is(count(429, @rs), 31, 'quietrise: 1 admitted, 31 refused');
    ok(eventually(10, sub { redis_int(client_key('qr', 'o', 1, 3600000)) == 31 }),
        'quietrise: a rising price: Redis counts all 31 refusals')
        or diag('refusals in Redis: ' . redis_int(client_key('qr', 'o', 1, 3600000)));
    my $d = (decode_token(get($n2, 'qr', 'quietrise')->header('X-PoW-Challenge')) || {})
        ->{payload}{difficulty};
    is($d, 6, 'quietrise: node B prices the client by every refusal (1 + log2(32))');
}

# coalescing: 50 requests of one client at once on one node (one worker)
# cost a couple of script calls, not 50 (the first asks Redis; the others
# arrive while it is on its way: Redis is frozen for 0.2 s, well within
# the 500 ms timeout, so that they surely do), still exactly 20 admitted,
# one strike per 429

{
    my $calls = script_calls();
    $n1->pause_redis;
    my @rs = burst(sub { Time::HiRes::sleep(0.2); $n1->resume_redis },
        map { [$n1, 'co', 'co'] } 1 .. 50);
    is(count(200, @rs), 20, 'coalesced: 50 at once, limit 20: exactly 20 admitted');
    my $refused = count(429, @rs);
    is($refused, 30, 'coalesced: the other 30 are 429') or diag(statuses(@rs));
    ok(eventually(10, sub { redis_int(client_key('co', 's')) == $refused }),
        'coalesced: one strike per 429 in Redis')
        or diag('strikes: ' . redis_int(client_key('co', 's')));
    my $cost = script_calls() - $calls;
    ok($cost < 5, "coalesced: 50 concurrent requests of one client cost $cost script calls (< 5)");
    is($n1->redis_cmd('ZCARD', client_key('co', 'w', 20, 3600000)), 20,
        'coalesced: 20 unique members in the sorted set');
    my @remaining = sort { $a <=> $b } map { $_->header('X-RateLimit-Remaining') }
        grep { ($_->status // 0) == 200 } @rs;
    is("@remaining", join(' ', 0 .. 19), 'coalesced: Remaining counts down 19 .. 0');
}

# without the freeze, the burst spreads over a few loop iterations: still
# exact, and far fewer calls than requests

{
    my $calls = script_calls();
    my @rs = burst(map { [$n1, 'co2', 'co'] } 1 .. 50);
    is(count(200, @rs), 20, 'a burst of 50, limit 20: exactly 20 admitted');
    is(count(429, @rs), 30, '... the other 30 are 429');
    ok(eventually(10, sub { redis_int(client_key('co2', 's')) == 30 }),
        '... one strike per 429 in Redis');
    note('a burst of 50 cost ' . (script_calls() - $calls) . ' script calls');
}

# a request carrying a solution still asks Redis (the spend is global), and
# takes back the strike of its 429, which the node had counted

{
    my @rs = map { get($n2, 'pay', 'api') } 1 .. 7;
    my %sol = solution($rs[-1]);
    my $calls = script_calls();
    my $r = get($n2, 'pay', 'api', %sol);
    is($r->status, 200, 'a solution to a challenge the node sent: 200');
    ok(script_calls() > $calls, '... decided in Redis');
    ok(eventually(10, sub { redis_int(client_key('pay', 's')) == 1 }),
        'its strike taken back: 2 refusals, 1 paid')
        or diag('strikes: ' . redis_int(client_key('pay', 's')));
}

###############################################################################

$n1->done_testing;
