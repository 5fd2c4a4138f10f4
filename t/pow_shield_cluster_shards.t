#!/usr/bin/perl

# Cluster mode on a Redis Cluster (docs/operations.md "Redis Cluster": "pow_shield_redis
# <url>,<url> cluster"): a local 3-master cluster; each client's keys live on
# the master of its hash tag's slot, and two nginx nodes share one limit per
# client whatever shard it lands on; a slot migrated while requests wait
# (ASK, TRYAGAIN, then MOVED) keeps the limit exact without a 5xx; a master
# killed fails only its own clients (pow_shield_fail decides them), while
# clients on the other shards are still counted in Redis, across nodes.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Digest::SHA qw(sha256_hex);
use Test::More;
use Test::PowShield qw(:pow :util :redis);

###############################################################################

my @n = map { Test::PowShield->new->require_redis } 1 .. 3;
plan(skip_all => 'redis-cli not found') unless `redis-cli --version 2>/dev/null`;

# three masters, cluster mode; the others keep serving when one is down
my @r = run_redis_cluster(@n);
my @ports = map { $_->port } @r;

sub conf {
    return http_conf(<<'EOF', workers => 1);
    pow_shield_secret "cluster-shards-suite-secret-0123456789";
    pow_shield_redis redis://127.0.0.1:SEED1,redis://127.0.0.1:SEED2 cluster timeout=1s;
    pow_shield_strikes off;

    server {
        %%TEST_SERVER%%

        pow_shield_key $http_x_client;
        pow_shield_limit 3 1h;
        # Redis unavailable: 503, so that each answer says who decided
        pow_shield_fail closed;

        location / {
        }

        # spends during an outage: the local replay cache, then Redis
        location /local/ {
            pow_shield_limit 1 1h;
            pow_shield_difficulty 1;
            pow_shield_challenge_ttl 1h;
            pow_shield_fail local;
        }
    }
EOF
}

# two nginx nodes, seeded with different masters
for my $i (0, 1) {
    (my $c = conf()) =~ s/SEED1/$ports[$i]/;
    $c =~ s/SEED2/$ports[1 - $i]/;
    $n[$i]->write_file_expand('nginx.conf', $c);
    $n[$i]->write_file("html/$_", qq({"ok":true}\n)) for 'data.json', 'local/data.json';
    $n[$i]->run;
}
my ($ng1, $ng2) = @n[0, 1];

sub get { $_[0]->http_get('/data.json', 'X-Client' => $_[1]) }

sub wkey { client_key($_[0], 'w', 3, 3600000) }

# the slot of a client's keys and the index (0..2) of the master serving it
sub slot_of { $r[0]->cmd('CLUSTER', 'KEYSLOT', wkey($_[0])) }

sub owner { $r[0]->slot_owner($_[0], @r) }

sub node_id { $r[$_[0]]->cmd('CLUSTER', 'MYID') }

# Clients spread over the shards: two per master (one for now, one for
# after the kill), plus one to migrate.
my (%by_shard, @all);
for my $k (1 .. 200) {
    my $client = "client-$k";
    my $shard = owner(slot_of($client));
    next unless defined $shard && @{$by_shard{$shard} //= []} < 3;
    push @{$by_shard{$shard}}, $client;
    last if 3 == grep { @{$by_shard{$_} // []} == 3 } 0 .. 2;
}
is(scalar(grep { @{$by_shard{$_} // []} == 3 } 0 .. 2), 3,
    'test clients found on each of the 3 masters');

###############################################################################

# a shared limit across two nodes, clients on every shard

for my $shard (0 .. 2) {
    my $client = $by_shard{$shard}[0];
    my @s = map { get($_, $client) } $ng1, $ng2, $ng1, $ng2;
    is(statuses(@s), '200 200 200 429',
        "shard $shard ($client): the limit of 3 is shared by both nginx nodes");
    is($r[$shard]->cmd('ZCARD', wkey($client)), 3,
        "... and counted on the master of its slot ($ports[$shard])");
}

###############################################################################

# a slot migrated while requests wait: ASK (then TRYAGAIN: the script's keys
# are split), then MOVED once the slot is assigned

{
    my $from = 2;
    my $to = 0;
    my $client = $by_shard{$from}[1];
    my $slot = slot_of($client);
    is(get($ng1, $client)->status, 200, "migrating $client (slot $slot): 1st request");

    my $asking_before = $r[$to]->calls('asking');
    ok($r[$to]->cmd('CLUSTER', 'SETSLOT', $slot, 'IMPORTING', node_id($from)),
        "slot $slot importing on master $to");
    ok($r[$from]->cmd('CLUSTER', 'SETSLOT', $slot, 'MIGRATING', node_id($to)),
        "slot $slot migrating on master $from");
    my $keys = $r[$from]->cmd('CLUSTER', 'GETKEYSINSLOT', $slot, 100) || [];
    ok(@$keys && $r[$from]->cmd('MIGRATE', '127.0.0.1', $ports[$to], '', 0, 5000,
        'KEYS', @$keys), 'its keys moved with MIGRATE');

    # requests now wait: the old master says ASK, the new one TRYAGAIN
    my @waiting = map {
        $_->send_request("GET /data.json HTTP/1.0\r\nHost: localhost\r\n"
            . "X-Client: $client\r\n\r\n")
    } $ng1, $ng2;
    ok(eventually(5, sub { $r[$to]->calls('asking') > $asking_before }),
        'ASK was followed (ASKING on the importing master)');

    for my $i (0 .. 2) {
        $r[$i]->cmd('CLUSTER', 'SETSLOT', $slot, 'NODE', node_id($to));
    }
    my @s = ($ng1->read_response($waiting[0]), $ng2->read_response($waiting[1]));
    is(statuses(@s), '200 200', 'the waiting requests are decided by Redis, no 5xx');
    is(statuses(get($ng1, $client), get($ng2, $client)), '429 429',
        '... and the limit stays exact after the move (MOVED followed)');
    is($r[$to]->cmd('ZCARD', wkey($client)), 3, '... counted on the new master');
    is($r[$from]->cmd('EXISTS', wkey($client)), undef,
        '... and no longer on the old one (it answers MOVED)');
    like($r[$from]->error // '', qr/^MOVED /, '... (MOVED)');
}

###############################################################################

# a challenge solved while the master of its token's slot is down is spent
# locally, and written to that master once it is back

{
    my $dead = 1;
    my $client = $by_shard{$dead}[2];
    $n[$dead]->kill_redis;
    my $local = sub {
        my ($t, %h) = @_;
        $t->http_get('/local/data.json', 'X-Client' => $client, %h);
    };
    is($local->($ng1)->status, 200, "master $dead down: its client is decided locally");
    # a challenge: its spent key lives in the client's slot, on the dead
    # master (the spend script takes back the client's strike in one call)
    my ($token_key, %sol);
    for (1 .. 60) {
        my $r = $local->($ng1);
        next unless $r->status == 429;
        %sol = solution($r);
        $token_key = client_key($client, 'p', sha256_hex($sol{'X-PoW-Challenge'}));
        last if owner($r[0]->cmd('CLUSTER', 'KEYSLOT', $token_key)) == $dead;
        undef $token_key;
    }
    ok($token_key, "a challenge whose spent key is in a slot of master $dead");
    is($local->($ng1, %sol)->status, 200, '... solved while that master is down');

    # Back, it answers CLUSTERDOWN for its first 2 s (Redis waits for the
    # cluster to reconfigure it): the spend waits, written with the next
    # requests (any client's).
    $n[$dead]->restart_redis;
    ok(eventually(20, sub {
        get($ng1, 'any-client');
        ($r[$dead]->cmd('EXISTS', $token_key) // 0) == 1;
    }), '... and written to that master once it is back');
    # once node 2 talks to that master again (its own back-off)
    ok(eventually(20, sub { get($ng2, $by_shard{$dead}[0])->status != 503 }),
        'node 2 decides the clients of that master through Redis again');
    # (the restarted master lost the window: one request fills it again)
    is($local->($ng2)->status, 200, '... its window starts again (Redis restarted empty)');
    # (its challenge carries node 1's own generation, issued while the
    # slot's master was down: node 2 answers a fresh challenge; the spent
    # record written back makes every node's spend refuse it too)
    my $replayed = $local->($ng2, %sol);
    is($replayed->status, 429, '... and refuses the token node 1 spent (a fresh challenge)')
        or diag($replayed->raw);
    ok(eventually(20, sub {
        ($r[$dead]->cmd('CLUSTER', 'INFO') // '') =~ /cluster_state:ok/
    }), "master $dead rejoined the cluster");
}

###############################################################################

# a master killed: its clients fall back, the others are still shared

{
    my $dead = 1;
    $n[$dead]->kill_redis;
    my $orphan = $by_shard{$dead}[1];
    is(statuses(map { get($_, $orphan) } $ng1, $ng2, $ng1, $ng2), '503 503 503 503',
        "master $dead killed: its clients are decided by pow_shield_fail (closed: 503)");
    for my $shard (0, 2) {
        my $client = $by_shard{$shard}[2];
        is(statuses(map { get($_, $client) } $ng1, $ng2, $ng1, $ng2), '200 200 200 429',
            "... clients of master $shard still share one limit in Redis");
    }
    for my $t ($ng1, $ng2) {
        my @down = $t->error_log_lines(qr/redis 127\.0\.0\.1:$ports[$dead] unavailable/);
        ok(@down >= 1 && @down <= 2,
            'the dead master is logged once per outage (two outages) and worker');
    }
}

Test::PowShield->done_testing;
