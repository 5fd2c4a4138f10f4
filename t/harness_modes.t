#!/usr/bin/perl

# The harness's one entry for both modes (Test::PowShield::Modes
# each_mode): the body runs for local mode, then for cluster mode, each
# with nginx of its own (cluster mode: its nodes on one Redis the harness
# started), every test it reports named after its mode, and the nodes
# stopped once the body is done.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Test2::API qw(test2_stack);
use Test::PowShield qw(http_conf);
use Test::PowShield::Modes;
use Test::PowShield::Redis;

###############################################################################

plan(skip_all => 'cluster mode needs redis-server')
    unless Test::PowShield::Redis->available;

my $conf = http_conf(<<'EOF');
    %%REDIS%%

    server {
        %%TEST_SERVER%%

        location /api/ {
            pow_shield_limit 1 1h;
            pow_shield_key $http_x_client;
        }
    }
EOF

# the names of the tests as they are reported
my @names;
test2_stack()->top->listen(sub {
    my (undef, $e) = @_;
    push @names, $e->name if $e->isa('Test2::Event::Ok');
});

my @seen;
my @modes = Test::PowShield::Modes->each_mode($conf, nodes => 2,
    files => { 'html/api/data.json' => "{}\n" }, sub {
    my ($m) = @_;
    push @seen, "$m";
    is(scalar(my @n = $m->nodes), $m->cluster ? 2 : 1,
        'nodes: 2 in cluster mode, the one in local mode');
    is($m->node(1)->http_get('/api/data.json', 'X-Client' => 'a')->status, 200,
        'request 1 (node 1): under the limit');
    is($m->node(2)->http_get('/api/data.json', 'X-Client' => 'a')->status, 429,
        'request 2 (node 2): over the limit the nodes share');
    if ($m->cluster) {
        ok($m->redis->counts('a'), 'decided by the Redis of the mode');
        like($m->conf($conf), qr{pow_shield_redis redis://127\.0\.0\.1:%%REDIS_PORT%%;},
            'its configuration names that Redis');
        ok(1, 'cluster: a name that starts with its mode');
    } else {
        ok(!defined $m->redis, 'no Redis');
        unlike($m->conf($conf), qr/pow_shield_redis/, 'no pow_shield_redis line');
    }
});

is("@seen", 'local cluster', 'each_mode: local mode, then cluster mode');
ok(!grep({ $_->master_pid } map { $_->nodes } @modes),
    'each_mode: every node stopped once its body is done');
ok(!$modes[1]->redis->pid, 'each_mode: the Redis of cluster mode stopped too');

is_deeply([grep { !/^(local|cluster): / } @names[0 .. 10]], [],
    'every test of the bodies is named after its mode');
is(scalar(grep { /^cluster: cluster: / } @names), 0,
    'a name that starts with its mode is kept as it is');

###############################################################################

Test::PowShield::Modes->done_testing;
