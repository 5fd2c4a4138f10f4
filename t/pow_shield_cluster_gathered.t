#!/usr/bin/perl

# Several clients' checks in one call on a real Redis Cluster
# (docs/operations.md, "What a green request costs Redis"): a check that
# comes while a check of its slot is on its way waits, and those that
# gathered meanwhile go together in one call of the checks script when
# that reply comes. Their keys share the slot, so the master runs the call
# (no CROSSSLOT), and each client is counted in its own window.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Test::PowShield qw(:pow :util :redis);

###############################################################################

my @n = map { Test::PowShield->new->require_redis } 1 .. 3;
plan(skip_all => 'redis-cli not found') unless `redis-cli --version 2>/dev/null`;

my @r = run_redis_cluster(@n);
my $t = $n[0];

$t->write_file_expand('nginx.conf', http_conf(<<"EOF", workers => 1));
    pow_shield_secret "cluster-gathered-suite-secret-0123456789";
    pow_shield_redis redis://127.0.0.1:@{[ $r[0]->port ]} cluster timeout=2s;

    server {
        %%TEST_SERVER%%

        pow_shield_key \$http_x_client;
        pow_shield_limit 3 1h;
        # Redis unavailable (a CROSSSLOT error too): 503, never a pass
        pow_shield_fail closed;

        location / {
        }
    }
EOF
$t->write_file('html/data.json', qq({"ok":true}\n));
$t->run;

sub wkey { client_key($_[0], 'w', 3, 3600000) }

# Three clients whose keys share one slot.
my (%by_slot, @three);
for my $k (1 .. 20000) {
    my $client = "gathered-$k";
    my $slot = $r[0]->cmd('CLUSTER', 'KEYSLOT', wkey($client));
    push @{$by_slot{$slot}}, $client;
    if (@{$by_slot{$slot}} == 3) {
        @three = @{$by_slot{$slot}};
        last;
    }
}
is(scalar @three, 3, 'three clients of one slot found');
my $owner = $r[0]->slot_owner($r[0]->cmd('CLUSTER', 'KEYSLOT', wkey($three[0])), @r);
ok(defined $owner, "their slot's master found");
my $master = $r[$owner // 0];

sub request { "GET /data.json HTTP/1.0\r\nHost: localhost\r\nX-Client: $_[0]\r\n\r\n" }

###############################################################################

# The first client's check held in Redis (its master paused); the other
# two come while it is on its way and go together once it is answered.

my $scripts = $master->calls('evalsha', 'eval');
$master->cmd('CLIENT', 'PAUSE', 500, 'ALL');
my $first = $t->send_request(request($three[0]));
Time::HiRes::sleep(0.15);
my @behind = map { $t->send_request(request($_)) } @three[1, 2];
my @r3 = map { $t->read_response($_) } $first, @behind;

is(statuses(@r3), '200 200 200', 'the three clients pass (no call failed)');
is(join(' ', map { $_->header('X-RateLimit-Remaining') // '-' } @r3), '2 2 2',
    'each counted once, in its own window');
is(join(' ', map { $master->cmd('ZCARD', wkey($_)) } @three), '1 1 1',
    "each client's window on its slot's master holds its one request");
is($master->calls('evalsha', 'eval') - $scripts, 2,
    'two script calls for three clients: the two that came behind went in one');

# Nothing is left waiting: the next request of each goes and is counted.
is(join(' ', map { $t->http_get('/data.json', 'X-Client' => $_)->header('X-RateLimit-Remaining') // '-' } @three),
    '1 1 1', 'the next requests are counted on');

done_testing;
