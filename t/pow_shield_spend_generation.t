#!/usr/bin/perl

# One spend per solution across nodes, whatever happens to Redis
# (docs/operations.md, "Choosing a fail policy"; docs/protocol.md, the
# token's "gen"): two nodes on one Redis.  A solution spent at node A is
# not accepted again at node B after FLUSHALL (Redis lost the spent
# record), nor at node B during an outage (its zone never saw the spend);
# the client gets a fresh challenge (or a 409) and pays again, never a free
# request.  During an outage a node accepts the solutions of challenges it
# issued itself.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Test::PowShield qw(:pow :util);

###############################################################################

my $a = Test::PowShield->new->require_redis;
$a->run_redis;

my $conf = http_conf(<<'EOF', workers => 1);
    pow_shield_secret "spend-generation-suite-secret-0123456789";
    pow_shield_redis redis://127.0.0.1:%%REDIS_PORT%% timeout=500ms connect_timeout=500ms;
    pow_shield_fail local;
    pow_shield_strikes off;

    server {
        %%TEST_SERVER%%

        location /api/ {
            pow_shield_key $http_x_client;
            pow_shield_limit 1 1h;
            pow_shield_difficulty 1;
        }
    }
EOF
my $b = Test::PowShield->new;
$b->use_redis($a->redis);
for my $t ($a, $b) {
    $t->write_file_expand('nginx.conf', $conf);
    $t->write_file('html/api/data.json', qq({"ok":true}\n));
    $t->run;
}

###############################################################################

sub get {
    my ($t, $client, %h) = @_;
    return $t->http_get('/api/data.json', 'X-Client' => $client, %h);
}

# Uses up $client's limit at $t (1 per hour), so that what follows needs
# a solution: under its limit a request passes whatever it carries.
sub over_limit {
    my ($t, $client) = @_;
    get($t, $client) for 1 .. 2;
}

# A paid request at $t: over the limit, the 429's challenge solved.
sub challenge {
    my ($t, $client) = @_;
    get($t, $client) for 1 .. 1;
    my $r = get($t, $client);
    return $r->status == 429 ? { solution($r) } : undef;
}

ok(eventually(10, sub { get($a, 'warm-a')->status == 200 && get($b, 'warm-b')->status == 200 }),
    'both nodes decide with Redis');

# normal operation: a challenge of node A is paid at node B, once
my $sol = challenge($a, 'x');
ok($sol, 'node A challenges an over-limit client');
is(get($b, 'x', %$sol)->status, 200, 'its solution is accepted at node B');
is(get($a, 'x', %$sol)->status, 409, '... once: a replay at node A is refused');

# (a) spend at A, FLUSHALL, replay at B
$sol = challenge($a, 'flush');
is(get($a, 'flush', %$sol)->status, 200, 'spent at node A');
$a->redis_cmd('FLUSHALL');
over_limit($b, 'flush');
my $replay = get($b, 'flush', %$sol);
isnt($replay->status, 200, 'after FLUSHALL, a replay at node B is not accepted (' . $replay->status . ')');
ok($replay->header('X-PoW-Challenge'), '... and gets a fresh challenge');
ok(eventually(10, sub {
    my $s = challenge($b, 'after-flush');
    $s && get($a, 'after-flush', %$s)->status == 200;
}), 'after the flush, new challenges are paid as before (across nodes)');
over_limit($b, 'flush');
isnt(get($b, 'flush', %$sol)->status, 200, 'the old solution stays refused');

# (b) spend at A, Redis down, replay at B
$sol = challenge($a, 'outage');
is(get($a, 'outage', %$sol)->status, 200, 'spent at node A');
$a->stop_redis;
ok(eventually(10, sub { get($b, 'probe-b')->status == 200 && get($a, 'probe-a')->status == 200 }),
    'Redis down: pow_shield_fail local decides');
over_limit($b, 'outage');
$replay = get($b, 'outage', %$sol);
isnt($replay->status, 200, 'during the outage, a replay at node B is not accepted (' . $replay->status . ')');
ok($replay->header('X-PoW-Challenge'), '... it gets a fresh challenge');

# during the outage: a node's own challenges are paid there, once
my $own = challenge($b, 'own');
ok($own, 'node B challenges during the outage');
over_limit($a, 'own');
isnt(get($a, 'own', %$own)->status, 200, "node B's outage challenge is not accepted at node A");
is(get($b, 'own', %$own)->status, 200, '... but at node B, which issued it');
is(get($b, 'own', %$own)->status, 409, '... once');

$a->redis->start;
ok(eventually(15, sub { get($a, 'back-a')->status == 200 && get($b, 'back-b')->status == 200
    && @{$a->redis_cmd('KEYS', 'pow:{*') // []} > 0 }), 'Redis back');
over_limit($a, 'own');
isnt(get($a, 'own', %$own)->status, 200, "after the outage: still refused at node A");
is(get($b, 'own', %$own)->status, 409, '... and at node B');

###############################################################################

$a->done_testing;
