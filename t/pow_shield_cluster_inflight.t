#!/usr/bin/perl

# Cluster mode when Redis stops answering but keeps the connection (a
# stalled server, SIGSTOP): commands in flight per worker are capped (1024,
# docs/operations.md "Choosing a fail policy").  Requests beyond the cap don't queue
# behind the stall: they are decided at once by pow_shield_fail, and the
# cap is logged once (and counted: pow_shield_redis_errors_total{kind=
# "refused"}).  The requests within the cap are answered by Redis when it
# resumes.  The checks of new clients that come while one is on its way go
# several in one command (cluster/node/gather.rs): the first 64 of them in
# four commands, the next ones one command each; so 1024 commands hold
# 1024 - 4 + 64 requests.  A request decided at once that way and then sent
# to another location (try_files) is decided again there, not left
# waiting for the call that was never sent.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Test::PowShield qw(:pow :util);
use Test::PowShield::Metrics qw(scrape metric);

###############################################################################

my $CAP = 1024;
my $OVER = 40;
# Requests held: the cap's commands, four of them for 64 gathered checks.
my $WAITING = $CAP - 4 + 64;

my $t = Test::PowShield->new->require_redis;
$t->run_redis;

my %preamble = (workers => 1, main => 'worker_rlimit_nofile 4096;',
    events => 'worker_connections 2048;');
$t->write_file_expand('nginx.conf', http_conf(<<'EOF', %preamble));
    pow_shield_secret "cluster-inflight-suite-secret-012345678";
    # far beyond the test: requests within the cap wait for Redis
    pow_shield_redis redis://127.0.0.1:%%REDIS_PORT%% timeout=60s;

    server {
        listen 127.0.0.1:%%PORT_8080%% backlog=2048;
        server_name localhost;

        root %%TESTDIR%%/html;

        add_header X-Result $pow_shield_result always;

        pow_shield_key $http_x_client;

        location /api/ {
            pow_shield_limit 100000 1h;
            pow_shield_fail local;
        }

        # (passed, then sent on to /api2/ by try_files: its access phase again)
        location /on/ {
            pow_shield_limit 100000 1h;
            pow_shield_fail open;
            try_files $uri /api2/data.json;
        }

        location /api2/ {
            pow_shield_limit 50000 1h;
            pow_shield_fail open;
        }

        location = /metrics {
            pow_shield_status;
        }
    }
EOF
$t->write_file("html/$_/data.json", '{"ok":true}') for 'api', 'api2';
$t->run;

###############################################################################

is($t->http_get('/api/data.json', 'X-Client' => 'warm')->status, 200,
    'Redis decides');

$t->pause_redis;

my @socks = map {
    $t->send_request("GET /api/data.json HTTP/1.0\r\nX-Client: c$_\r\n\r\n")
} 1 .. $WAITING + $OVER;

ok(eventually(20, sub { (grep { answered($_) } @socks) >= $OVER }),
    "Redis stalled: $OVER requests beyond the cap are answered at once");
is(scalar(grep { answered($_) } @socks), $OVER,
    'the requests within the cap still wait for Redis');
is($t->error_log_count(qr/pow_shield: redis \S+: $CAP commands in flight/), 1,
    'the cap is logged once');
my $on = $t->http_get('/on/missing.json', 'X-Client' => 'on');
is($on->status, 200, 'beyond the cap, a request sent on to another location by '
    . 'try_files is decided there too (fail open), not left waiting');

$t->resume_redis;

my @rs = map { $t->read_response($_) } @socks;
is(scalar(grep { ($_->status // 0) == 200 } @rs), $WAITING + $OVER,
    'Redis resumed: every request is answered');
is(scalar @{$t->redis_cmd('KEYS', 'pow:{*') // []}, $WAITING + 1,
    'the requests within the cap were counted in Redis');

my $m = scrape($t);
is(metric($m, 'pow_shield_redis_errors_total', kind => 'refused'), $OVER + 2,
    'metrics: the requests beyond the cap are counted as refused (the one sent on twice)');
is(metric($m, 'pow_shield_redis_round_trip_seconds_count'),
    metric($m, 'pow_shield_redis_commands_total'),
    'metrics: every command sent got its reply');

###############################################################################

$t->done_testing;
