#!/usr/bin/perl

# A Redis Cluster's stacked checks gathered per master (docs/operations.md,
# "Redis Cluster"): requests under two limits (the client's, its /24's:
# two slots) that come together go in one call per master, each slot's as
# its own call would have them, each request counted once by all its
# limits; a slot migrating away from the master the node's slot table
# names is answered NOTLOCAL by that master (nothing written) and goes in a
# call of its own, which Redis redirects: the limits stay exact, no 5xx.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Test::PowShield qw(:pow :util :redis);

my @n = map { Test::PowShield->new->require_redis } 1 .. 3;
plan(skip_all => 'redis-cli not found') unless `redis-cli --version 2>/dev/null`;

my @r = run_redis_cluster(@n);
my @ports = map { $_->port } @r;

my $t = $n[0];
$t->write_file_expand('nginx.conf', http_conf(<<"EOF", workers => 1));
    pow_shield_secret "cluster-masters-suite-secret-0123456789";
    pow_shield_redis redis://127.0.0.1:$ports[0],redis://127.0.0.1:$ports[1] cluster timeout=2s;
    # Redis unavailable: 503, so that each answer says who decided
    pow_shield_fail closed;

    server {
        %%TEST_SERVER%%

        set_real_ip_from 127.0.0.1;
        real_ip_header X-Real-IP;
        pow_shield_key \$remote_addr;

        location / {
            pow_shield_limit 3 1h;
            pow_shield_limit 5 1h name=net key=\$pow_shield_net;
        }
    }
EOF
$t->write_file('html/data.json', qq({"ok":true}\n));
$t->run;

sub request { "GET /data.json HTTP/1.0\r\nHost: localhost\r\nX-Real-IP: $_[0]\r\n\r\n" }
sub from { $t->http_get('/data.json', 'X-Real-IP' => $_[0]) }
sub scripts { my $n = 0; $n += $_->calls('evalsha', 'eval') for @r; $n }
sub node_id { $r[$_[0]]->cmd('CLUSTER', 'MYID') }

ok(eventually(30, sub { from('192.0.2.1')->status == 200 }), 'the cluster is reached');

# 30 requests at once from three addresses of each of ten /24s: one call
# per slot would be 60 (two parts a request, each in a slot of its own).
my $before = scripts();
my @ips = map { my $net = $_; map { "10.$net.0.$_" } 1 .. 3 } 1 .. 10;
my @green = at_once(map { [$t, request($_)] } @ips);
my $calls = scripts() - $before;
is(join(' ', map { $_->status // '-' } @green), join(' ', ('200') x 30), '30 requests at once: 30 x 200');
cmp_ok($calls, '<', 45, "... in $calls script calls (one per slot: 60)");
diag("30 requests of two parts at once: $calls script calls");

# Each counted once by its /24 (5 an hour): two more addresses pass, the
# third is refused by the /24, and the client limits are untouched.
for my $net (1 .. 10) {
    my @s = map { from("10.$net.0.$_")->status } 4 .. 6;
    is("@s", '200 200 429', "/24 $net: counted once a request (3 + 2, then refused)");
}

###############################################################################

# A slot migrating: the /24's keys moved to another master, the node's
# table still naming the old one.

my $net_ip = '10.77.0';
is(from("$net_ip.1")->status, 200, 'a new /24: its first request');
# (its log's tag: the key= value's, "\x01key=" and the /24, in hex)
my $tag = unpack('H*', "\x01key=$net_ip.0/24");
my ($net_key, $from);
for my $i (0 .. 2) {
    my @keys = grep { /\{$tag\}:w:5:3600000$/ } @{ $r[$i]->cmd('KEYS', 'pow:*') // [] };
    ($net_key, $from) = ($keys[0], $i) if @keys;
}
ok(defined $net_key, "the /24's log found on master $from") or BAIL_OUT('no /24 log');
my $slot = $r[0]->cmd('CLUSTER', 'KEYSLOT', $net_key);
my $to = ($from + 1) % 3;
my $asking = $r[$to]->calls('asking');
ok($r[$to]->cmd('CLUSTER', 'SETSLOT', $slot, 'IMPORTING', node_id($from)), "slot $slot importing on master $to");
ok($r[$from]->cmd('CLUSTER', 'SETSLOT', $slot, 'MIGRATING', node_id($to)), "... migrating on master $from");
my $keys = $r[$from]->cmd('CLUSTER', 'GETKEYSINSLOT', $slot, 100) || [];
ok(@$keys && $r[$from]->cmd('MIGRATE', '127.0.0.1', $ports[$to], '', 0, 5000, 'KEYS', @$keys),
    '... its keys moved with MIGRATE');

# Four more addresses of it whose own windows live on the same master as
# the /24's (each request's two parts go in one call of that master, whose
# slot table is stale for the /24's slot: NOTLOCAL, then a call of its own,
# redirected by ASK), with addresses of other /24s, while the slot
# migrates; then the slot is assigned to its new master (MOVED).
my @same = grep {
    $r[0]->slot_owner($r[0]->cmd('CLUSTER', 'KEYSLOT', client_key("$net_ip.$_", 'w', 3, 3600000)), @r) == $from
} 2 .. 250;
cmp_ok(scalar @same, '>=', 4, "addresses of it with their own window on master $from");
my @others = map { "10.88.$_.1" } 1 .. 12;
my @waiting = map { $t->send_request(request($_)) } (map { "$net_ip.$_" } @same[0 .. 3]), @others;
ok(eventually(5, sub { $r[$to]->calls('asking') > $asking }),
    '... the /24 redirected by ASK to the importing master');
for my $i (0 .. 2) {
    $r[$i]->cmd('CLUSTER', 'SETSLOT', $slot, 'NODE', node_id($to));
}
my @mixed = map { $t->read_response($_) } @waiting;
diag("master $from, errors (a script's reads of a key it does not serve among them): "
    . join(" ", ($r[$from]->cmd("INFO", "errorstats") // "") =~ /^errorstat_(\w+:count=\d+)/mg));
is(join(' ', map { $_->status // '-' } @mixed), join(' ', ('200') x 16),
    'while it migrates: 16 requests, 16 x 200 (no 5xx, none fell back)');
is($r[$to]->cmd('ZCARD', $net_key), 5, '... the /24 counted once a request on the new master (5)');
is(from("$net_ip.6")->status, 429, '... and refused at its limit after the move');
is(from('10.99.0.1')->status, 200, 'a client of another /24 passes');

done_testing;
