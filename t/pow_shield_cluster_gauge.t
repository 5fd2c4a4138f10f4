#!/usr/bin/perl

# The fallback gauge on a Redis Cluster (docs/metrics.md,
# "pow_shield_redis_fallback_active"): it counts the connections requests
# depend on. A seed that is down but owns no slot in the cluster's map (a
# stale entry in the seed list, a former master whose slots moved) does not
# keep it above 0 once the map is read; a master that owns slots does count
# while it is down, and stops counting once it is back.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Test::PowShield qw(:pow :util);
use Test::PowShield::Metrics qw(scrape metric);

###############################################################################

my $t = Test::PowShield->new->require_redis;
my $redis = $t->run_redis(args => ['--cluster-enabled', 'yes',
    '--cluster-config-file', $t->testdir . '/nodes.conf']);
$redis->cmd('CLUSTER', 'ADDSLOTSRANGE', 0, 16383);
ok(eventually(10, sub { ($redis->cmd('CLUSTER', 'INFO') // '') =~ /cluster_state:ok/ }),
    'a one-node cluster owns every slot');

# A seed where nothing listens, listed first.
my $dead = $t->port('dead_seed');

# one worker: one connection per node, one gauge entry per node
$t->write_file_expand('nginx.conf', http_conf(<<"EOF", workers => 1));
    pow_shield_secret "cluster-gauge-suite-secret-0123456789";
    pow_shield_redis redis://127.0.0.1:$dead,redis://127.0.0.1:%%REDIS_PORT%% cluster
                     timeout=500ms connect_timeout=500ms;
    pow_shield_fail closed;

    server {
        %%TEST_SERVER%%

        location /api/ {
            pow_shield_key \$http_x_client;
            pow_shield_limit 100 1h;
        }

        location = /metrics {
            pow_shield_status;
        }
    }
EOF
$t->write_file('html/api/data.json', qq({"ok":true}\n));
$t->run;

###############################################################################

sub get { $t->http_get('/api/data.json', 'X-Client' => $_[0])->status // 'none' }

sub fallback { metric($_[0], 'pow_shield_redis_fallback_active') }

ok(eventually(10, sub { get('a') eq '200' }), 'requests are decided by the live node');
my $m = scrape($t);
cmp_ok(metric($m, 'pow_shield_redis_errors_total', kind => 'io'), '>=', 1,
    'the dead seed was tried: kind="io"');
ok(eventually(10, sub { get('b'); fallback(scrape($t)) == 0 }),
    'the dead seed owns no slot: fallback gauge 0');
is(get('c'), '200', 'and requests are still decided by Redis');

# The node that owns the slots dies: its connection counts.
$t->kill_redis;
ok(eventually(10, sub { get('d'); fallback(scrape($t)) == 1 }),
    'the master of every slot down: fallback gauge 1 (not 2: the seed still does not count)');
is(get('e'), '503', 'pow_shield_fail closed decides meanwhile');

$t->restart_redis;
ok(eventually(15, sub { get('f') eq '200' && fallback(scrape($t)) == 0 }),
    'the master back: fallback gauge 0 again');

$t->done_testing;
