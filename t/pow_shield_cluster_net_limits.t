#!/usr/bin/perl

# Limits per network on a Redis Cluster (issue 38 point 2; docs/operations.md,
# "Scrapers on many addresses"): a request's counts lie in several slots
# (its own, its /24's), checked with one call per slot and counted by all
# or by none. Two nginx nodes on a 3-master cluster: a scraper over many
# addresses of one /24 is challenged at the /24's limit; two nodes racing
# never admit more than the limit; a client of another /24 passes; the
# refused /24 is refused on the nodes (Redis's commands counted); nobody is
# struck for a /24's refusal.

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

sub conf {
    return http_conf(<<'EOF', workers => 2);
    pow_shield_secret "cluster-net-limits-suite-secret-01234567";
    pow_shield_redis redis://127.0.0.1:SEED1,redis://127.0.0.1:SEED2 cluster timeout=2s;

    server {
        %%TEST_SERVER%%

        set_real_ip_from 127.0.0.1;
        real_ip_header X-Real-IP;
        add_header X-Strikes $pow_shield_strikes always;

        location / {
            pow_shield_limit 60 1m;
            pow_shield_limit 40 1h name=net key=$pow_shield_net;
        }

        # each line its own way: the client's approx counter in its slot,
        # the /24's exact log in another
        location /mixed/ {
            pow_shield_limit 3 1m approx name=quick;
            pow_shield_limit 6 1h name=mixednet key=$pow_shield_net;
        }

        # the price per key: a /24's new address pays for its /24's overage
        location /priced/ {
            pow_shield_limit 5 1h name=net key=$pow_shield_net;
            pow_shield_difficulty 8b max=20b;
        }
    }
EOF
}

for my $i (0, 1) {
    (my $c = conf()) =~ s/SEED1/$ports[$i]/;
    $c =~ s/SEED2/$ports[1 - $i]/;
    $n[$i]->write_file_expand('nginx.conf', $c);
    $n[$i]->write_file("html/$_", qq({"ok":true}\n)) for 'data.json', 'priced/data.json', 'mixed/data.json';
    $n[$i]->run;
}
my @nodes = @n[0, 1];

sub from {
    my ($node, $ip) = @_;
    return $nodes[$node]->http_get('/data.json', 'X-Real-IP' => $ip);
}

# The commands requests made Redis run, by name, over the cluster's
# masters: the node's own upkeep (PING, CLUSTER SLOTS/SHARDS, this test's
# INFO) left out, since how many of those fall in a measurement depends on
# how long it takes, not on the requests.
sub commands {
    my %n;
    for my $redis (@r) {
        my %c = ($redis->cmd('INFO', 'commandstats') // '') =~ /^cmdstat_([^:]+):calls=(\d+)/mg;
        $n{$_} += $c{$_} for grep { !/^(?:ping|info|cluster\||client\||hello|auth|command)/ } keys %c;
    }
    return \%n;
}
sub total { my $n = 0; $n += $_ for values %{ $_[0] }; return $n }

ok(eventually(30, sub { from(0, '192.0.2.1')->status == 200 && from(1, '192.0.2.2')->status == 200 }),
    'both nodes reach the cluster');

# A scraper: 40 addresses of one /24 over both nodes use up its 40.
my @first = map { from($_ % 2, "198.51.100.$_") } 1 .. 40;
is(scalar(grep { $_->status == 200 } @first), 40, '40 addresses of a /24 over two nodes: 40 x 200');
my $r = from(1, '198.51.100.41');
is($r->status, 429, 'the next address of it: 429, by the /24 limit');
is($r->header('X-Strikes'), 0, '... nobody struck for it');

# Refused on the nodes: new addresses of the /24 cost Redis (almost) nothing.
my $before = commands();
my %status;
for my $a (42 .. 241) {
    $status{ from($_, "198.51.100.$a")->status }++ for 0, 1;
}
my $after = commands();
my $used = total($after) - total($before);
diag(join ' ', map { "$_=" . ($after->{$_} - ($before->{$_} // 0)) } sort keys %$after);
is(join(',', keys %status), '429', '400 requests from 200 more addresses of it, both nodes: all 429');
cmp_ok($used, '<=', 40, "... Redis ran $used commands for them (at most 0.1 a request)");
diag("400 requests of the refused /24 on a Redis Cluster: $used Redis commands");

# Two nodes racing: 100 new addresses of another /24 at once over both
# nodes, whose limit is 40: exactly 40 admitted (never more).
my @race = at_once(map {
    my $ip = "203.0.113.$_";
    [$nodes[$_ % 2], "GET /data.json HTTP/1.0\r\nHost: localhost\r\nX-Real-IP: $ip\r\n\r\n"]
} 1 .. 100);
my $admitted = grep { ($_->status // 0) == 200 } @race;
cmp_ok($admitted, '<=', 40, "100 addresses of a /24 at once over two nodes: $admitted admitted, never over 40");
cmp_ok($admitted, '>=', 30, '... and most of its 40 used');
diag("race: $admitted admitted of 100");

# The price per key on a Redis Cluster: a new address of a /24 at 20x its
# limit is asked more than one of a /24 at 2x.
sub priced { $nodes[$_[0]]->http_get('/priced/data.json', 'X-Real-IP' => $_[1]) }
priced($_ % 2, "10.1.1.$_") for 1 .. 10;
priced($_ % 2, "10.2.2.$_") for 1 .. 100;
my ($low, $high) = map { priced(0, $_)->header('X-PoW-Bits') // 0 } '10.1.1.200', '10.2.2.200';
cmp_ok($high, '>', $low, "price per key: a new address of a /24 at 20x: $high bits, at 2x: $low bits");

# approx beside exact on a Redis Cluster: the client's approx limit and its
# /24's exact one, in two slots, each counted its own way.
sub mixed { $nodes[$_[0]]->http_get('/mixed/data.json', 'X-Real-IP' => $_[1]) }
my @m = map { mixed($_ % 2, '100.64.7.1') } 1 .. 4;
is(join(' ', map { $_->status } @m), '200 200 200 429',
    'approx beside exact on a Redis Cluster: the client\'s 4th refused by its approx minute');
like($m[3]->header('RateLimit') // '', qr/^"quick";r=0;/, '... named "quick"');
my @o = map { mixed($_ % 2, "100.64.7.$_") } 2 .. 5;
is(join(' ', map { $_->status } @o), '200 200 200 429',
    '... three more addresses of its /24 fill the /24\'s exact 6 (3 + 3), the next is refused');
like($o[3]->header('RateLimit') // '', qr/^"mixednet";r=0;/, '... by "mixednet"');
my %types;
for my $redis (@r) {
    my @keys = @{ $redis->cmd('KEYS', 'pow:*') // [] };
    for my $key (@keys) {
        next unless $key =~ /:[aw]:(3:60000|6:3600000)$/;
        $types{$1} = $redis->cmd('TYPE', $key);
    }
}
is($types{'3:60000'}, 'hash', '... the approx minute is a counter (a hash)');
is($types{'6:3600000'}, 'zset', '... the /24\'s exact hour is a log (a sorted set)');

# A client of another network passes.
is(from(0, '192.0.2.77')->status, 200, 'a client of another /24: 200');

done_testing();
