#!/usr/bin/perl

# One spend per solution on a Redis Cluster, whatever happens to a shard
# (docs/operations.md, "One spend per solution"; docs/protocol.md, the
# token's "gen"): each slot has its data generation, at pow:gen:{<n>} in
# that slot; the check answers it (the 429's challenge carries it) and the
# spend checks it in the same call.  Two nginx nodes on a 3-master cluster:
# a solution spent at node A is not accepted again at node B after the
# master of the client's slot is flushed (FLUSHALL), restarted empty, or
# replaced by a replica that never received the spend (CLUSTER FAILOVER
# TAKEOVER after its master died); the client gets a fresh challenge (429,
# or 409 when the generation changed between check and spend) and pays
# once more, never a free request.  Every limit kind (exact, approx,
# stacked) answers the generation.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Test::PowShield qw(:pow :util :redis);

###############################################################################

my @n = map { Test::PowShield->new->require_redis } 1 .. 4;
plan(skip_all => 'redis-cli not found') unless `redis-cli --version 2>/dev/null`;

# three masters over every slot; the fourth Redis becomes a replica later
my @r = run_redis_cluster(@n[0 .. 2]);
my @ports = map { $_->port } @r;

sub conf {
    return http_conf(<<'EOF', workers => 1);
    pow_shield_secret "cluster-spend-generation-suite-secret-01";
    pow_shield_redis redis://127.0.0.1:SEED1,redis://127.0.0.1:SEED2 cluster timeout=1s;
    pow_shield_strikes off;
    pow_shield_fail local;

    server {
        %%TEST_SERVER%%

        pow_shield_key $http_x_client;
        pow_shield_difficulty 1;
        pow_shield_challenge_ttl 1h;

        location /api/ {
            pow_shield_limit 1 1h;
        }

        location /approx/ {
            pow_shield_limit 1 1h approx;
        }

        location /stacked/ {
            pow_shield_limit 1 1h;
            pow_shield_limit 100 1d;
        }
    }
EOF
}

# two nginx nodes, seeded with different masters (not the third: it fails over)
for my $i (0, 1) {
    (my $c = conf()) =~ s/SEED1/$ports[$i]/;
    $c =~ s/SEED2/$ports[1 - $i]/;
    $n[$i]->write_file_expand('nginx.conf', $c);
    $n[$i]->write_file("html/$_/data.json", qq({"ok":true}\n)) for qw(api approx stacked);
    $n[$i]->run;
}
my ($a, $b) = @n[0, 1];

###############################################################################

sub get {
    my ($t, $client, %h) = @_;
    my $where = delete $h{where} // 'api';
    return $t->http_get("/$where/data.json", 'X-Client' => $client, %h);
}

# Uses up $client's limit at $t (1 per hour), so that what follows needs a
# solution: under its limit a request passes whatever it carries.
sub over_limit {
    my ($t, $client, %h) = @_;
    get($t, $client, %h) for 1 .. 2;
}

# A challenge of $t for an over-limit $client: the response and its solution.
sub challenge {
    my ($t, $client, %h) = @_;
    get($t, $client, %h);
    my $r = get($t, $client, %h);
    return $r->status == 429 ? ($r, { solution($r) }) : ($r, undef);
}

sub slot_of { $r[0]->cmd('CLUSTER', 'KEYSLOT', client_key($_[0], 's')) }

# the index (0..2) of the master serving $client's keys
sub owner { $r[0]->slot_owner(slot_of($_[0]), @r) }

# Cluster-spec CRC16 (XMODEM), to name the slot's generation key.
sub crc16 {
    my $crc = 0;
    for my $byte (unpack 'C*', $_[0]) {
        $crc ^= $byte << 8;
        for (1 .. 8) {
            $crc = $crc & 0x8000 ? (($crc << 1) ^ 0x1021) & 0xffff : ($crc << 1) & 0xffff;
        }
    }
    return $crc;
}

# pow:gen:{<n>}, n the smallest decimal that hashes to the client's slot
sub gen_key {
    my $slot = slot_of($_[0]);
    my $i = 0;
    $i++ until crc16($i) % 16384 == $slot;
    return "pow:gen:{$i}";
}

sub token_gen { (decode_token($_[0]->header('X-PoW-Challenge') // '') || {})->{payload}{gen} }

# Clients on master $i, named $prefix-0, $prefix-1, ...
sub clients_on {
    my ($i, $prefix, $count) = @_;
    my @c;
    for (my $k = 0; @c < $count; $k++) {
        push @c, "$prefix-$k" if (owner("$prefix-$k") // -1) == $i;
    }
    return @c;
}

ok(eventually(10, sub { get($a, 'warm-a')->status == 200 && get($b, 'warm-b')->status == 200 }),
    'both nodes decide with Redis');

###############################################################################

# normal operation: a challenge of node A carries its slot's generation and
# is paid at node B, once

my ($r, $sol) = challenge($a, 'x');
my $replay;
ok($sol, 'node A challenges an over-limit client');
my $m = owner('x');
my $stored = $r[$m]->cmd('GET', gen_key('x')) // '';
my ($run, $gen) = split /:/, $stored;
ok($gen && token_gen($r) eq $gen, "the challenge carries the slot's generation ($stored)");
is($run, $r[$m]->cmd('INFO', 'server') =~ /run_id:(\w+)/ ? $1 : '',
    '... written under the run id of the master serving the slot');
is(get($b, 'x', %$sol)->status, 200, 'its solution is accepted at node B');
is(get($a, 'x', %$sol)->status, 409, '... once: a replay at node A is refused');

# a 429 the node refuses itself (Redis refused the client until a moment
# still ahead: docs/operations.md, "What is decided where") carries the
# slot's generation too: paid at the other node
my $local = get($a, 'x');
is($local->status, 429, 'node A refuses the client again');
is(token_gen($local), (split /:/, $r[$m]->cmd('GET', gen_key('x')))[1],
    "... its challenge carries the slot's generation");
is(get($b, 'x', solution($local))->status, 200, '... and is paid at node B');

# spend at A, FLUSHALL on the master of the client's slot, replay at B:
# for each kind of limit

for my $where (qw(api approx stacked)) {
    my $client = "flush-$where";
    ($r, $sol) = challenge($a, $client, where => $where);
    ok($sol, "$where: node A challenges");
    is(get($a, $client, %$sol, where => $where)->status, 200, "$where: spent at node A");
    my $was = $r[owner($client)]->cmd('GET', gen_key($client));
    $r[owner($client)]->cmd('FLUSHALL');
    over_limit($b, $client, where => $where);
    my $replay = get($b, $client, %$sol, where => $where);
    is($replay->status, 429,
        "$where: after FLUSHALL of its master, a replay at node B gets a fresh challenge");
    my $now = $r[owner($client)]->cmd('GET', gen_key($client)) // '';
    ok($now && $now ne $was, "$where: ... the slot has a new generation ($now)");
    is(token_gen($replay), (split /:/, $now)[1], "$where: ... which the fresh challenge carries");
    is(get($a, $client, solution($replay), where => $where)->status, 200,
        "$where: ... and paying it is accepted (at node A)");
}

# Redis lost the scripts (SCRIPT FLUSH: the module sends them again with
# EVAL), and the slot's generation was written under another run id (as on
# a promoted replica): the spend renews it and refuses the solution (409)
# with a fresh challenge of the new generation

$_->cmd('SCRIPT', 'FLUSH') for @r;
($r, $sol) = challenge($a, 'scripts');
ok($sol, 'after SCRIPT FLUSH: node A challenges');
my $owner = $r[owner('scripts')];
my ($old_gen) = ($owner->cmd('GET', gen_key('scripts')) // '') =~ /:(\d+)$/;
is(token_gen($r), $old_gen, "... in the slot's generation");
$owner->cmd('SET', gen_key('scripts'), "0123456789abcdef0123456789abcdef01234567:$old_gen");
$_->cmd('SCRIPT', 'FLUSH') for @r;
$replay = get($b, 'scripts', %$sol);
is($replay->status, 409, 'a generation of another run: the spend at node B refuses the solution');
my $owner_run = $owner->cmd('INFO', 'server') =~ /run_id:(\w+)/ ? $1 : '';
my $renewed_here = $owner->cmd('GET', gen_key('scripts')) // '';
like($renewed_here, qr/^\Q$owner_run\E:\d+$/, "... renews the slot's generation under the master's run id");
is(token_gen($replay), (split /:/, $renewed_here)[1], '... which its fresh challenge carries');
is(get($a, 'scripts', solution($replay))->status, 200, '... and paying it is accepted (at node A)');

# spend at A, the master restarted empty (it keeps its slots), replay at B

my ($restart) = clients_on(0, 'restart', 1);
($r, $sol) = challenge($a, $restart);
is(get($a, $restart, %$sol)->status, 200, 'spent at node A');
$r[0]->restart;
ok(eventually(20, sub {
    ($r[0]->cmd('CLUSTER', 'INFO') // '') =~ /cluster_state:ok/
        && get($b, "$restart-probe-b")->status == 200 && get($a, "$restart-probe-a")->status == 200;
}), 'the master restarted empty serves its slots again') or diag($r[0]->cmd('CLUSTER', 'INFO'));
# (wait until node B decides the client's slot with Redis, not its zone)
ok(eventually(10, sub {
    get($b, $restart);
    $r[0]->cmd('EXISTS', client_key($restart, 'w', 1, 3600000));
}), "node B counts the client in Redis again");
over_limit($b, $restart);
$replay = get($b, $restart, %$sol);
isnt($replay->status, 200, 'after the restart, a replay at node B is not accepted (' . $replay->status . ')');
ok($replay->header('X-PoW-Challenge'), '... it gets a fresh challenge');

# spend at A, and the master dies before its replica received the spend:
# the replica takes over with the slot's generation but not the spend (its
# run id differs: the spend script renews the generation)

my $replica = $n[3]->run_redis(args => ['--cluster-enabled', 'yes',
    '--cluster-config-file', $n[3]->testdir . '/nodes.conf',
    '--cluster-node-timeout', '2000', '--cluster-require-full-coverage', 'no']);
my $master_id = $r[2]->cmd('CLUSTER', 'MYID');
my $out = `redis-cli --cluster add-node 127.0.0.1:@{[$replica->port]} 127.0.0.1:$ports[2] --cluster-slave --cluster-master-id $master_id 2>&1`;
is($?, 0, 'a replica joins the third master') or diag($out);

my ($victim, @probes) = clients_on(2, 'failover', 12);
($r, $sol) = challenge($a, $victim);
ok($sol, 'node A challenges a client of the third master');
ok(eventually(20, sub {
    ($replica->cmd('INFO', 'replication') // '') =~ /master_link_status:up/
        && ($replica->cmd('DBSIZE') // -1) == ($r[2]->cmd('DBSIZE') // -2);
}), 'the replica has what the master has (the slot generation too)');

# The replica stops receiving: the master now wants a password it does not
# have (the nodes' connections are authenticated already), and its link is cut.
$r[2]->cmd('CONFIG', 'SET', 'requirepass', 'not-for-the-replica');
$r[2]{requirepass} = 'not-for-the-replica';
$r[2]->cmd('CLIENT', 'KILL', 'TYPE', 'replica');
ok(eventually(10, sub { ($replica->cmd('INFO', 'replication') // '') =~ /master_link_status:down/ }),
    'the replica is cut off from its master');

is(get($a, $victim, %$sol)->status, 200, 'spent at node A (the master only)');
sub spent_records { scalar @{$_[0]->cmd('KEYS', client_key($victim, 'p', '*')) // []} }
is(spent_records($r[2]), 1, '... the master has its spent record');
$r[2]->kill;
ok($replica->cmd('CLUSTER', 'FAILOVER', 'TAKEOVER'), 'the replica takes over');
ok(eventually(20, sub {
    ($replica->cmd('ROLE') // [''])->[0] eq 'master'
        && ($replica->cmd('CLUSTER', 'INFO') // '') =~ /cluster_state:ok/;
}), '... and is the master of those slots');
is(spent_records($replica), 0, '... without the spent record');

# (wait until node B decides the third master's clients with the new master)
my $k = 0;
ok(eventually(30, sub {
    my $probe = $probes[$k++ % @probes];
    get($b, $probe);
    @{$replica->cmd('KEYS', client_key($probe, '*')) // []} > 0;
}), 'node B counts those clients in the new master');
ok(eventually(10, sub {
    get($b, $victim);
    $replica->cmd('EXISTS', client_key($victim, 'w', 1, 3600000));
}), "... the client's too");
over_limit($b, $victim);
$replay = get($b, $victim, %$sol);
isnt($replay->status, 200,
    'after the failover, a replay at node B is not accepted (' . $replay->status . ')');
ok($replay->header('X-PoW-Challenge'), '... it gets a fresh challenge');
my $renewed = $replica->cmd('GET', gen_key($victim)) // '';
my $replica_run = $replica->cmd('INFO', 'server') =~ /run_id:(\w+)/ ? $1 : '';
like($renewed, qr/^\Q$replica_run\E:\d+$/, "the slot's generation is renewed under the new master's run id");
is(token_gen($replay), (split /:/, $renewed)[1], '... which the fresh challenge carries');
is(get($b, $victim, solution($replay))->status, 200, '... and paying it is accepted');

# the whole cluster down: the fallback decides (the zone's own bucket),
# and its challenge carries the node's own generation, so that it is paid
# there during the outage

my ($down) = clients_on(0, 'down', 1);
is(statuses(get($b, $down), get($b, $down)), '200 429', 'node B: Redis refuses the client');
$_->kill for $r[0], $r[1], $replica;
# (until node B's connections have failed: the zone decides other clients)
my $k2 = 0;
ok(eventually(15, sub { get($b, 'probe-down-' . $k2++)->status == 200 && $k2 > 3 }),
    'the cluster down: node B decides alone');
my @f = (get($b, $down), get($b, $down));
is(statuses(@f), '200 429', "the cluster down: node B's fallback limits the client on its own bucket");
is(get($b, $down, solution($f[1]))->status, 200, '... and its challenge is paid there during the outage');

###############################################################################

$a->done_testing;
