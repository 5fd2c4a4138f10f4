#!/usr/bin/perl

# Setting up a Redis Cluster (docs/operations.md, "Setting up a Redis
# Cluster"), as written: three masters from the section's redis.conf, each
# started as "redis-server FILE" (the command of Debian's redis-server@
# unit, without its systemd supervision), joined by the section's
# "redis-cli --cluster create" (answered "yes"), checked by its
# "cluster info" line, and then used by nginx through the "pow_shield_redis
# ... cluster" line of "Redis Cluster": the limits are counted in the
# cluster. What the test changes, and only that: the hosts become
# 127.0.0.1 (each file's bind too), port 7000 a free port per node (in
# the file name, port, nodes and dump file names), /etc/redis and
# /var/lib/redis directories of the test.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use File::Path qw(make_path);
use POSIX ();
use Test::More;
use Test::PowShield qw(:util http_conf);
use Test::PowShield::Redis;

###############################################################################

my $t = Test::PowShield->new->require_redis;
my $dir = $t->testdir;
my $REPO = $Test::PowShield::REPO;
(my $redis_cli = Test::PowShield::Redis::binary()) =~ s/redis-server$/redis-cli/;
$redis_cli = 'redis-cli' unless -x $redis_cli;

open my $fh, '<', "$REPO/docs/operations.md" or die "docs/operations.md: $!";
my $ops = do { local $/; <$fh> };
my ($cluster) = $ops =~ /^## Redis Cluster\n(.*?)^## /ms
    or die "docs/operations.md: \"Redis Cluster\" not found\n";
my ($setup) = $cluster =~ /^### Setting up a Redis Cluster\n(.*)/ms
    or die "docs/operations.md: \"Setting up a Redis Cluster\" not found\n";
my ($redis_line) = $cluster =~ /```nginx\n(pow_shield_redis .*?)```/s
    or die "the section's pow_shield_redis line not found\n";
my ($conf_path, $conf) = $setup =~ /```\n# (\/etc\/redis\/redis-7000\.conf) on 10\.0\.0\.5[^\n]*\n(.*?)```/s
    or die "the node's file (# /etc/redis/redis-7000.conf on 10.0.0.5) not found\n";
my ($sh) = $setup =~ /```sh\n(.*?)```/s
    or die "the section's commands (```sh) not found\n";
my @commands = grep { !/^#/ && /\S/ } split /\n/, $sh;
is(scalar @commands, 3, 'the commands: start the nodes, create the cluster, check it')
    or diag $sh;
my ($start, $create, $check) = @commands;

# the recipe's shape: what the rest of this test changes must be there

like($conf, qr/^bind 10\.0\.0\.5$/m, 'the file binds its host\'s address');
like($conf, qr/^port 7000$/m, '... listens on 7000');
like($conf, qr/^cluster-enabled yes$/m, '... as a cluster node');
like($conf, qr/^cluster-config-file nodes-7000\.conf$/m, '... with a nodes file of its own');
like($conf, qr/^requirepass s3cret$/m, '... the password of the pow_shield_redis URLs');
like($redis_line, qr{redis://:s3cret\@10\.0\.0\.5:7000,redis://:s3cret\@10\.0\.0\.6:7000,redis://:s3cret\@10\.0\.0\.7:7000\s}
    , 'the pow_shield_redis line names the three nodes');
like($redis_line, qr/\scluster\b/, '... as a cluster');
is($start, 'systemctl enable --now redis-server@7000', 'a node is Debian\'s redis-server@7000');
my $unit = '/lib/systemd/system/redis-server@.service';
SKIP: {
    skip "no $unit (Debian's redis-server package)", 1 unless -f $unit;
    my $text = do { local (@ARGV, $/) = $unit; <> };
    like($text, qr{^ExecStart=\S*redis-server /etc/redis/redis-%i\.conf }m,
        "... whose unit runs $conf_path");
}
like($create, qr/^REDISCLI_AUTH=s3cret redis-cli --cluster create 10\.0\.0\.5:7000 10\.0\.0\.6:7000 10\.0\.0\.7:7000 --cluster-replicas 0$/,
    'the cluster is made of the three');

# a free port per node, its bus port (+10000) within range

my @ports;
for my $i (0 .. 2) {
    my $p;
    for my $try (0 .. 50) {
        $p = $t->port("node$i-$try");
        last if $p + 10000 <= 65535;
    }
    push @ports, $p;
}
my %host = map { ("10.0.0." . (5 + $_) . ':7000' => "127.0.0.1:$ports[$_]") } 0 .. 2;
sub here {
    my ($text) = @_;
    $text =~ s/(10\.0\.0\.[567]:7000)/$host{$1}/g;
    return $text;
}

# the nodes: the file as written, for each host; started as the unit does

my @pids;
END { Test::PowShield::Redis::stop_pid($_, 10) for grep { $_ } @pids }
my @nodes;
for my $i (0 .. 2) {
    my $p = $ports[$i];
    my $file = $conf;
    $file =~ s/^bind 10\.0\.0\.5$/bind 127.0.0.1/m or die;
    $file =~ s/7000/$p/g;
    $file =~ s{^dir /var/lib/redis$}{dir $dir/var-lib-redis-$i}m
        or die "the file's dir is not /var/lib/redis\n";
    make_path("$dir/var-lib-redis-$i");
    (my $path = $conf_path) =~ s/7000/$p/;
    $path =~ s{^/etc/redis/}{$dir/etc-redis/} or die;
    $t->write_file($path, $file);
    my $pid = fork // die "fork: $!";
    if ($pid == 0) {
        open STDOUT, '>>', "$dir/redis-$i.stdout";
        open STDERR, '>&', \*STDOUT;
        exec Test::PowShield::Redis::binary(), $path or POSIX::_exit(127);
    }
    push @pids, $pid;
    push @nodes, Test::PowShield::Redis->new(dir => "$dir/var-lib-redis-$i", port => $p,
        requirepass => 's3cret');
}
ok(eventually(10, sub { !grep { ($_->cmd('PING') // '') ne 'PONG' } @nodes }),
    'the three nodes answer, with the password');

# the cluster, as the section makes and checks it

(my $create_here = here($create)) =~ s/ redis-cli / '$redis_cli' /;
my $out = `printf 'yes\\n' | $create_here 2>&1`;
is($?, 0, 'redis-cli --cluster create, as written: done') or diag $out;
like($out, qr/All 16384 slots covered/, '... every slot covered');
(my $check_here = here($check)) =~ s/ redis-cli / '$redis_cli' /;
$check_here =~ s/-p 7000 /-p $ports[0] / or die "the check names no port 7000: $check\n";
$check_here =~ s/-h 10\.0\.0\.5 /-h 127.0.0.1 / or die "the check names no host 10.0.0.5: $check\n";
my $state = '';
ok(eventually(20, sub { ($state = `$check_here 2>&1`) =~ /^cluster_state:ok\s*$/ }),
    'the check prints cluster_state:ok') or diag $state;

# nginx with the section's pow_shield_redis line

my $line = here($redis_line);
$t->write_file_expand('nginx.conf', http_conf(<<"EOF"));
    pow_shield_secret "cluster-setup-suite-secret-0123456789ab";
    pow_shield_difficulty 1;

    $line
    set_real_ip_from 127.0.0.1;
    real_ip_header X-Real-IP;

    server {
        %%TEST_SERVER%%

        location /api/ {
            pow_shield_limit 2 1m;
        }
    }
EOF
$t->write_file('html/api/data.json', '{}');
$t->run;

# 40 clients: each master holds some (all in two of three: 3 × (2/3)^40)
my @clients = map { "198.51.100.$_" } 1 .. 40;
my %seen;
for my $ip (@clients) {
    my @r = map { $t->http_get('/api/data.json', 'X-Real-IP' => $ip) } 1 .. 3;
    $seen{statuses(@r)}++;
}
is(join(',', keys %seen), '200 200 429', 'each client: its 2 pass, the third is challenged');
my @keys = map { scalar @{$_->cmd('KEYS', 'pow:*') || []} } @nodes;
is(scalar(grep { $_ > 0 } @keys), 3, 'the counts are in the cluster, on its three masters')
    or diag "@keys";
ok($t->error_log_count(qr/pow_shield: redis cluster map: \d+ slot ranges? on 3 masters/),
    'the module read the map: three masters');
is($t->error_log_count(qr/pow_shield: redis \S+ unavailable/), 0,
    '... and found none unavailable');

###############################################################################

$t->done_testing;
