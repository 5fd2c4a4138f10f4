#!/usr/bin/perl

# Cluster mode: a challenge solved while Redis is down (decided by the
# node's replay cache under pow_shield_fail local) is not accepted again
# once Redis is back (docs/operations.md): the node writes the spend to Redis
# when it reconnects, so every node refuses it; and the node that spent it
# refuses it even where Redis doesn't know it.  And a token spent through
# Redis is also kept in the node's replay cache: refused by the fallback
# during an outage, and after Redis lost its data.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Test::PowShield qw(:pow :util :redis);
use Test::PowShield::Modes;

###############################################################################

my $conf = http_conf(<<'EOF', workers => 1);
    pow_shield_secret "cluster-outage-suite-secret-012345678";
    pow_shield_redis redis://127.0.0.1:%%REDIS_PORT%% timeout=3s;

    server {
        %%TEST_SERVER%%

        add_header X-Result $pow_shield_result always;

        pow_shield_key $http_x_client;
        pow_shield_difficulty 1;
        pow_shield_challenge_ttl 1h;

        location /api/ {
            pow_shield_limit 1 1h;
            pow_shield_fail local;
        }
    }
EOF

my ($n1, $n2) = Test::PowShield::Modes->cluster_only($conf, nodes => 2,
    files => { 'html/api/data.json' => '{"ok":true}' })->nodes;

###############################################################################

sub get {
    my ($t, %h) = @_;
    return $t->http_get('/api/data.json', 'X-Client' => 'r', %h);
}

sub spent_keys { scalar @{$n1->redis_cmd('KEYS', 'pow:spent:*') || []} }

# Redis down: node A's shared-memory bucket and replay cache decide

$n1->kill_redis;

my @r = (get($n1), get($n1));
is(statuses(@r), '200 429', 'Redis down: node A limits locally');
my %sol = solution($r[1]);
my $r = get($n1, %sol);
is($r->status, 200, 'Redis down: the solution is accepted once');
is($r->header('X-Result'), 'solved', '... as solved');

# Redis back (empty): node A writes the spend when it reconnects, before
# any request

$n1->restart_redis;
ok(eventually(10, sub { spent_keys() == 1 }),
    'Redis back: node A writes the token it spent during the outage');

# (node B may still be retrying its connection: wait until Redis decides
# there, or its fallback would count the next request)
ok(eventually(10, sub {
    get($n2, 'X-Client' => 'b-probe');
    @{$n1->redis_cmd('KEYS', 'pow:{' . client_tag('b-probe') . '}*') // []} > 0;
}), 'node B decides with Redis again');
is(get($n2)->status, 200, 'node B: the window in Redis starts again');
# a challenge node A issued during the outage is paid only there: node B
# answers it with a fresh challenge (docs/operations.md, "One spend per
# solution")
is(get($n2, %sol)->status, 429, 'replayed on node B: a fresh challenge (429)');
is(get($n1, %sol)->status, 409, 'replayed on node A: 409');

# Redis forgets it (flushed): node A's replay cache still refuses it

# (the node refused client r on Redis's word: a flush reaches that within
# 2 s; the token is bound to its client key, so r replays it)
$n1->redis_cmd('FLUSHALL');
ok(eventually(10, sub { get($n1)->status == 200 }), 'Redis flushed: the window starts again');
is(get($n1, %sol)->status, 409,
    'replayed on node A after Redis forgot it: 409 (its replay cache)');

# the other way round: a token spent through Redis while it was healthy is
# refused by the node's fallback during an outage, and after Redis lost it

# (after the flush, challenges carry the new data generation once node A
# read it: until then they are answered with a fresh one)
is(statuses(get($n1, 'X-Client' => 'h'), get($n1, 'X-Client' => 'h')), '200 429',
    'Redis up: Redis limits');
# (the challenge below must have struck: within 3 s of Redis's return no
# unpaid 429 does, docs/operations.md, "What is decided where"; polled
# with fresh clients)
my $k = 0;
ok(eventually(10, sub {
    my $c = 'again-' . $k++;
    get($n1, 'X-Client' => $c) for 1 .. 2;
    ($n1->redis_cmd('GET', client_key($c, 's')) // 0) == 1;
}), 'Redis up: an unpaid 429 strikes again');
my %healthy;
ok(eventually(10, sub {
    %healthy = solution(get($n1, 'X-Client' => 'h'));
    get($n1, 'X-Client' => 'h', %healthy)->status == 200;
}), 'Redis up: the solution is accepted once');
$n1->kill_redis;
# (one request: the strike that would reach the threshold is Redis's to
# count, and while node A has not noticed Redis is gone that one asks it and
# meets the fallback)
# (refused on Redis's word while that is under 2 s old; later the node asks
# Redis again, which is gone, and the fallback decides: its own bucket)
like(get($n1, 'X-Client' => 'h')->status, qr/^(?:429|200)$/,
    'Redis down: the client Redis refused is refused by node A, or decided by the fallback');
is(statuses(get($n1, 'X-Client' => 'h2'), get($n1, 'X-Client' => 'h2')), '200 429',
    'Redis down: the fallback limits another client on its own bucket');
# (the token's own client, over its limit in the fallback too)
get($n1, 'X-Client' => 'h') for 1 .. 2;
# (a solution of Redis's generation cannot be spent now; the zone records
# it to take its strike back later, and finds it spent: a replay)
is(get($n1, 'X-Client' => 'h', %healthy)->status, 409,
    'Redis down: replayed on node A, the fallback finds it spent (409)');
$n1->restart_redis;
# (reconnected, node A forgets what Redis refused: Redis may have lost it)
ok(eventually(10, sub {
        get($n1, 'X-Client' => 'h');
        ($n1->redis_cmd('EXISTS', client_key('h', 'w', 1, 3600000)) // 0) == 1 }),
    'Redis back, empty: node A asks Redis again, which counts the client');
is(get($n1, 'X-Client' => 'h')->status, 429,
    'Redis back: the client is over its limit in Redis again');
like(get($n1, 'X-Client' => 'h', %healthy)->status, qr/^(?:409|429)$/,
    'replayed on node A after Redis lost its data: refused (another data generation)');

###############################################################################

$n1->done_testing;
