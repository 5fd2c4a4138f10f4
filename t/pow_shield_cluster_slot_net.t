#!/usr/bin/perl

# `pow_shield_redis ... cluster slot=net` (docs/operations.md, "One slot
# for a client and its network"): a client named by its address keeps its keys in the
# slot of its network's (`pow:{@key=198.51.100.0/24}{@198.51.100.7}:...`),
# so a request of a client's limit and a `key=$pow_shield_net` limit is one
# script call in one slot, as on one Redis, not one a slot. On a 3-master
# Redis Cluster: one EVALSHA a request where `slot=client` makes two; both
# limits still refuse; the breaker strikes and blocks the client; a payer
# passes; the admin view shows and lifts the client's keys where they are;
# a challenge a node of the other setting issued is asked again once, then
# paid.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Test::PowShield qw(:pow :util :redis);

# The docs' example: its pow_shield_redis options, and the key names shown.
my $ops = do {
    open my $fh, '<', "$Test::PowShield::REPO/docs/operations.md" or die "operations.md: $!";
    local $/;
    <$fh>;
};
my ($section) = $ops =~ /(### One slot for a client and its network.*?)\n##/s
    or die 'docs/operations.md: no "One slot for a client and its network"';
my ($redis) = $section =~ /```nginx\n(pow_shield_redis .*?);\n```/s
    or die 'docs/operations.md: the section has no pow_shield_redis example';
my (undef, @options) = split ' ', $redis =~ s/^pow_shield_redis //r;
is("@options", 'cluster slot=net timeout=50ms', 'the docs\' example: cluster slot=net');
my ($shown) = $section =~ /\n```\n(pow:.*?)```/s;
my @shown = map { (split ' ')[0] } split /\n/, $shown // '';
is(scalar @shown, 2, 'the docs show two key names');
my ($scan) = $section =~ /`(redis-cli --scan --pattern '[^']*')`/
    or die 'docs/operations.md: the section has no redis-cli --scan example';

my @n = map { Test::PowShield->new->require_redis } 1 .. 3;
plan(skip_all => 'redis-cli not found') unless `redis-cli --version 2>/dev/null`;

my @r = run_redis_cluster(@n);
my @ports = map { $_->port } @r;

# Node 0 with the docs' options (a longer timeout= for a busy test
# machine), node 1 as before (slot=client): the same limits.
for my $i (0, 1) {
    my $slot = $i == 0 ? join(' ', grep { !/^timeout=/ } @options) : 'cluster';
    my $t = $n[$i];
    $t->write_file_expand('nginx.conf', http_conf(<<"EOF", workers => 1));
    pow_shield_secret "cluster-slot-net-suite-secret-0123456789";
    pow_shield_redis redis://127.0.0.1:$ports[$i] $slot timeout=2s;
    pow_shield_difficulty 1;
    pow_shield_strikes 2 1h;

    set_real_ip_from 127.0.0.1;
    real_ip_header X-Real-IP;

    server {
        %%TEST_SERVER%%

        add_header X-Strikes \$pow_shield_strikes always;

        location / {
            pow_shield_limit 60 1m;
            pow_shield_limit 300 1m name=net key=\$pow_shield_net;
        }

        location /tight/ {
            pow_shield_limit 2 1h;
            pow_shield_limit 1000 1h name=net key=\$pow_shield_net;
        }

        location = /pow-shield/admin {
            pow_shield_admin;
            allow 127.0.0.1;
            deny all;
        }
    }
EOF
    $t->write_file("html/$_", qq({"ok":true}\n)) for 'data.json', 'tight/data.json';
    $t->run;
}
my ($net, $own) = @n[0, 1];

sub get {
    my ($t, $ip, $path, @h) = @_;
    return $t->http_get($path // '/data.json', 'X-Real-IP' => $ip, @h);
}

sub admin {
    my ($method, $key) = @_;
    return $net->http("$method /pow-shield/admin?key=$key HTTP/1.1\r\nHost: localhost\r\n"
        . "Content-Length: 0\r\nConnection: close\r\n\r\n");
}

# EVALSHA calls over the cluster's masters (every check is one).
sub evalsha {
    my $n = 0;
    for my $redis (@r) {
        my ($c) = ($redis->cmd('INFO', 'commandstats') // '') =~ /^cmdstat_evalsha:calls=(\d+)/m;
        $n += $c // 0;
    }
    return $n;
}

# Every key of the cluster, by the master holding it.
sub keys_by_master {
    return map { [sort @{ $_->cmd('KEYS', 'pow:*') // [] }] } @r;
}

ok(eventually(30, sub { get($net, '192.0.2.1')->status == 200 && get($own, '192.0.2.2')->status == 200 }),
    'both nodes reach the cluster');

# One call a request: the client's limit and its /24's in one slot.

for my $case ([$net, 'slot=net', '198.51.100.7', 1], [$own, 'slot=client', '203.0.113.7', 2]) {
    my ($t, $name, $ip, $calls) = @$case;
    get($t, $ip);    # (the slots' generations learnt)
    my $before = evalsha();
    my %status;
    $status{ get($t, $ip)->status }++ for 1 .. 10;
    my $used = evalsha() - $before;
    is(join(',', keys %status), '200', "$name: 10 requests of two limits: 200");
    cmp_ok($used, '>=', 10 * $calls, "$name: ... $used script calls in Redis");
    cmp_ok($used, '<=', 10 * $calls + 2, "$name: ... $calls a request");
}

my @held = keys_by_master();
my ($client_w, $net_w) = @shown;
is($client_w, 'pow:{@key=198.51.100.0/24}{@198.51.100.7}:w:60:60000',
    'the docs\' client key: 198.51.100.7\'s log under 60 a minute');
my @with = grep { my %k = map { $_ => 1 } @{ $held[$_] }; $k{$client_w} && $k{$net_w} } 0 .. $#r;
is(scalar @with, 1, "slot=net: the client's log ($client_w) and its /24's on one master");
is(scalar(grep { /^pow:\{\@198\.51\.100\.7\}/ } map { @$_ } @held), 0,
    '... and no key of the client under its own tag alone');
ok(scalar(grep { $_ eq 'pow:{@203.0.113.7}:w:60:60000' } map { @$_ } @held),
    'slot=client: the client\'s log under its own tag, as before');

# The docs' redis-cli command finds 192.0.2.7's keys (on its /24's master).
get($net, '192.0.2.7');
my @scanned = map { my $port = $_->port; split /\n/, `$scan -p $port` } @r;
is("@scanned", 'pow:{@key=192.0.2.0/24}{@192.0.2.7}:w:60:60000', "the docs' $scan: the client's log");

# Both limits still refuse: the /24's 300 (11 used by .7), then the client's.

my @more = map { get($net, '198.51.100.' . (10 + $_ % 240))->status } 0 .. 288;
is(scalar(grep { $_ == 200 } @more), 289, 'slot=net: 289 more requests of the /24 use up its 300');
my $r = get($net, '198.51.100.251');
is($r->status, 429, '... the next address: 429');
like($r->header('RateLimit') // '', qr/^"net";r=0;/, '... by "net"');
is($r->header('X-Strikes'), 0, '... nobody struck for the /24\'s refusal');

# Refused on the node: new addresses of the refused /24 cost Redis (almost)
# nothing, as with slot=client (t/pow_shield_cluster_net_limits.t).
sub commands {
    my $n = 0;
    for my $redis (@r) {
        my %c = ($redis->cmd('INFO', 'commandstats') // '') =~ /^cmdstat_([^:]+):calls=(\d+)/mg;
        $n += $c{$_} for grep { !/^(?:ping|info|cluster\||client\||hello|auth|command)/ } keys %c;
    }
    return $n;
}
my $before = commands();
my %refused;
$refused{ get($net, "198.51.100.$_")->status }++ for 100 .. 199;
my $used = commands() - $before;
is(join(',', keys %refused), '429', 'slot=net: 100 more addresses of the refused /24: all 429');
cmp_ok($used, '<=', 10, "... Redis ran $used commands for them (at most 0.1 a request)");

# The client's own limit, its breaker, and the admin view of its keys.

is(statuses(map { get($net, '192.0.2.50', '/tight/data.json') } 1 .. 5), '200 200 429 429 403',
    'slot=net: a client over its own 2: 429, two unpaid strikes open the breaker: 403');
my $view = admin('GET', '192.0.2.50')->json // {};
is($view->{redis}{block}, 'blocked', 'the admin view: blocked, in Redis');
is($view->{redis}{strikes}, 2, '... its 2 strikes');
my ($tight) = grep { $_->{window_ms} == 3_600_000 } @{ $view->{redis}{limits} // [] };
is($tight->{count} // -1, 2, '... its count under its own limit (2 admitted)');
my $tag = '{@key=192.0.2.0/24}{@192.0.2.50}';
is(scalar(grep { $_ eq "pow:$tag:s" } map { @$_ } keys_by_master()), 1,
    "... its strikes kept under pow:$tag:s");
is(admin('DELETE', '192.0.2.50')->status, 200, 'the admin lift: 200');
is(scalar(grep { index($_, "pow:$tag:") == 0 && /:[stuc]$/ } map { @$_ } keys_by_master()), 0,
    '... its strikes, trips, unpaid strikes and paid spends deleted');
is(get($net, '192.0.2.50', '/tight/data.json')->status, 429,
    '... and it is challenged again, not blocked');

# A payer passes (its spent token kept in its network's slot).

my @paying = map { get($net, '192.0.2.60', '/tight/data.json') } 1 .. 3;
is(statuses(@paying), '200 200 429', 'slot=net: another client over its 2: 429');
$r = $paying[2];
my $paid = get($net, '192.0.2.60', '/tight/data.json', solution($r));
is($paid->status, 200, '... pays its challenge: 200');
ok(scalar(grep { index($_, 'pow:{@key=192.0.2.0/24}{@192.0.2.60}:p:') == 0 } map { @$_ } keys_by_master()),
    '... its spent token under its tag, in its network\'s slot');

# A reload or a rolling change of slot=: a challenge issued under the other
# setting names another slot's generation; the payer is asked again once,
# and its new challenge passes.

is(statuses(map { get($net, '192.0.2.70', '/tight/data.json') } 1 .. 2), '200 200',
    'rolling change: a client uses up its 2 at the slot=net node');
my @issued = map { get($own, '192.0.2.70', '/tight/data.json') } 1 .. 3;
is(statuses(@issued), '200 200 429', '... and at the slot=client node: a challenge');
my $across = get($net, '192.0.2.70', '/tight/data.json', solution($issued[2]));
is($across->status, 429, '... paid at the slot=net node: asked again (429), not blocked');
$paid = get($net, '192.0.2.70', '/tight/data.json', solution($across));
is($paid->status, 200, '... its new challenge paid there: 200');

done_testing();
