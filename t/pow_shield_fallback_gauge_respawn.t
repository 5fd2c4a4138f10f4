#!/usr/bin/perl

# The fallback gauge when a worker dies during an outage (docs/metrics.md,
# "pow_shield_redis_fallback_active"): nginx starts a new worker in its
# place, which takes the dead worker's metrics slot.  The dead worker's +1
# goes with it (its -1 never comes): the gauge counts the new worker's
# connection only, and is back at 0 once Redis is, so the shipped alert
# stops firing.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Test::PowShield qw(:pow :util);
use Test::PowShield::Metrics qw(scrape metric);

###############################################################################

my $t = Test::PowShield->new->require_redis;
$t->run_redis;

$t->write_file_expand('nginx.conf', http_conf(<<'EOF', workers => 1));
    pow_shield_secret "fallback-respawn-suite-secret-0123456789";
    pow_shield_redis redis://127.0.0.1:%%REDIS_PORT%% timeout=200ms connect_timeout=200ms;

    server {
        %%TEST_SERVER%%

        location /api/ {
            pow_shield_key $http_x_client;
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

sub fallback { metric(scrape($t), 'pow_shield_redis_fallback_active') }

is(get('a'), '200', 'decided by Redis');
is(fallback(), 0, 'Redis up: fallback gauge 0');

$t->stop_redis;
ok(eventually(10, sub { get('b'); fallback() == 1 }), 'Redis down: fallback gauge 1');

# the worker dies while its connection counts
my ($worker) = $t->worker_pids;
kill 'KILL', $worker;
ok(eventually(10, sub {
    my @w = $t->worker_pids;
    @w == 1 && $w[0] != $worker;
}), 'nginx started a new worker');
ok(eventually(10, sub { get('c') eq '200' }), 'the new worker decides by pow_shield_fail');
is(fallback(), 1, "the new worker's connection counts, the dead worker's no more");

$t->restart_redis;
ok(eventually(15, sub { get('d'); fallback() == 0 }), 'Redis back: fallback gauge 0 again');

# nginx's own line for the killed worker, nothing else
ok(!grep({ /\[alert\]|\[crit\]/ && !/exited on signal 9/ } $t->error_log_lines),
    'no alert but the killed worker');
$t->allow_alert(qr/exited on signal 9/);

$t->done_testing;
