#!/usr/bin/perl

# Several requests' stacked checks in one call (docs/operations.md, "What a
# green request costs Redis"), on one Redis and on a real Redis Cluster:
# requests under two limits (the client's own, exact; its network's by
# key=, approx) that come while a check of their slot is on its way wait,
# and go together in one call of the stacked script when that reply comes.
# On a Redis Cluster each request's parts go per slot (its own, its
# network's), and the parts of several requests in one slot gather. Each
# request is counted in its own windows.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Test::PowShield qw(:pow :util :redis);

###############################################################################

my @n = map { Test::PowShield->new->require_redis } 1 .. 4;
plan(skip_all => 'redis-cli not found') unless `redis-cli --version 2>/dev/null`;

sub conf {
    my ($redis) = @_;
    return http_conf(<<"EOF", workers => 1);
    pow_shield_secret "gathered-stacked-suite-secret-0123456789";
    pow_shield_redis $redis timeout=2s;

    server {
        %%TEST_SERVER%%

        pow_shield_key \$http_x_client;
        # Redis unavailable: 503, never a pass
        pow_shield_fail closed;

        location / {
            pow_shield_limit 3 1h;
            pow_shield_limit 100 1h name=net key=\$http_x_net approx;
        }
    }
EOF
}

sub wkey   { client_key($_[0], 'w', 3, 3600000) }
sub netkey { client_key("\0key=$_[0]", 'a', 100, 3600000) }
sub request {
    my ($client, $net) = @_;
    return "GET /data.json HTTP/1.0\r\nHost: localhost\r\nX-Client: $client\r\nX-Net: $net\r\n\r\n";
}
sub scripts {
    my $n = 0;
    $n += $_->calls('evalsha', 'eval') for @_;
    return $n;
}

# Client $first's request held in Redis (@$masters paused), the others'
# come while it is on its way: the script calls the masters ran for them,
# and their responses.
sub gathered {
    my ($t, $net, $masters, $first, @behind) = @_;
    my $before = scripts(@$masters);
    $_->cmd('CLIENT', 'PAUSE', 500, 'ALL') for @$masters;
    my $held = $t->send_request(request($first, $net));
    Time::HiRes::sleep(0.15);
    my @later = map { $t->send_request(request($_, $net)) } @behind;
    my @responses = map { $t->read_response($_) } $held, @later;
    return (scripts(@$masters) - $before, @responses);
}

###############################################################################

# One Redis: every request of a call in its one slot.

my $one = $n[3];
$one->run_redis;
$one->write_file_expand('nginx.conf', conf('redis://127.0.0.1:%%REDIS_PORT%%'));
$one->write_file('html/data.json', qq({"ok":true}\n));
$one->run;
is($one->http_get('/data.json', 'X-Client' => 'warm', 'X-Net' => 'other')->status, 200,
    'one Redis: connected');

my @clients = map { "one-$_" } 1 .. 5;
my ($calls, @r5) = gathered($one, 'net-a', [$one->redis], @clients);
is(statuses(@r5), '200 200 200 200 200', 'one Redis: five stacked requests pass');
is($calls, 2, 'one Redis: two script calls for five requests: the four that came behind went in one');
is(join(' ', map { $_->header('X-RateLimit-Remaining') // '-' } @r5), '2 2 2 2 2',
    '... each counted once, in its own window');
is(join(' ', map { $one->redis->cmd('ZCARD', wkey($_)) } @clients), '1 1 1 1 1',
    "... each client's window holds its one request");
is($one->redis->cmd('HGET', netkey('net-a'), 'c'), 5, '... and the network counted each once');
is(join(' ', map { $one->http_get('/data.json', 'X-Client' => $_, 'X-Net' => 'net-a')->header('X-RateLimit-Remaining') // '-' } @clients),
    '1 1 1 1 1', '... the next requests are counted on');

###############################################################################

# A Redis Cluster: five clients whose windows share a slot, of one network
# (another slot): each request's parts go per slot, and each slot's parts
# of the four that came behind go in one call.

my @r = run_redis_cluster(@n[0 .. 2]);
my $t = $n[0];
$t->write_file_expand('nginx.conf', conf('redis://127.0.0.1:' . $r[0]->port . ' cluster'));
$t->write_file('html/data.json', qq({"ok":true}\n));
$t->run;
ok(eventually(30, sub { $t->http_get('/data.json', 'X-Client' => 'warm', 'X-Net' => 'other')->status == 200 }),
    'a Redis Cluster: reached');

my $net = 'net-b';
my $net_slot = $r[0]->cmd('CLUSTER', 'KEYSLOT', netkey($net));
my (%by_slot, @five);
for my $k (1 .. 50000) {
    my $client = "cluster-$k";
    my $slot = $r[0]->cmd('CLUSTER', 'KEYSLOT', wkey($client));
    next if $slot == $net_slot;
    push @{$by_slot{$slot}}, $client;
    if (@{$by_slot{$slot}} == 5) {
        @five = @{$by_slot{$slot}};
        last;
    }
}
is(scalar @five, 5, "five clients of one slot found, another than their network's");
my $owner = $r[0]->slot_owner($r[0]->cmd('CLUSTER', 'KEYSLOT', wkey($five[0])), @r);
my $net_owner = $r[0]->slot_owner($net_slot, @r);
ok(defined $owner && defined $net_owner, "their slots' masters found");

my ($cluster_calls, @c5) = gathered($t, $net, \@r, @five);
is(statuses(@c5), '200 200 200 200 200', 'a Redis Cluster: five stacked requests pass (no call failed)');
is($cluster_calls, 4,
    "four script calls for five requests of two parts each: the first's two, then one per slot for the four behind");
is(join(' ', map { $_->header('X-RateLimit-Remaining') // '-' } @c5), '2 2 2 2 2',
    '... each counted once, in its own window');
is(join(' ', map { $r[$owner // 0]->cmd('ZCARD', wkey($_)) } @five), '1 1 1 1 1',
    "... each client's window on its slot's master holds its one request");
is($r[$net_owner // 0]->cmd('HGET', netkey($net), 'c'), 5,
    "... and the network's count on its slot's master each once");
is(join(' ', map { $t->http_get('/data.json', 'X-Client' => $_, 'X-Net' => $net)->header('X-RateLimit-Remaining') // '-' } @five),
    '1 1 1 1 1', '... the next requests are counted on');

done_testing;
