#!/usr/bin/perl

# Commands sent after a full socket (src/redis/connection: a send that
# returns EAGAIN waits for the socket to be writable, then the rest of the
# pipeline goes out): with Redis stopped (SIGSTOP) a burst's calls fill
# the socket to it and the rest waits in the worker's output buffer; Redis
# then reads again but answers nothing (CLIENT PAUSE WRITE holds every
# script call, and Redis goes on reading its sockets meanwhile), so no
# reply comes to make the worker flush: only the socket's write event can.
# Redis must read every call queued while it was stopped, and once it
# answers, every request is decided by Redis, none lost, none a 5xx.
#
# The socket must hold less than the calls: a loopback TCP socket takes
# some 4 MB (nginx's end's send buffer grows to net.ipv4.tcp_wmem's
# largest), more than the calls of the 1,024 commands a connection may
# have in flight (some 2 MB at most: eight limits, keys of 64 characters,
# longer ones hashed) can fill; only root could shrink it (the TLS
# suite, t/pow_shield_cluster_tls_burst.t, runs in a network namespace of
# its own). A Unix-domain socket holds its sender's send buffer
# (net.core.wmem_default, 208 KB by default): Redis listens on one, the
# module's path is the same (Connection::flush, write_handler).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use List::Util qw(min);
use POSIX qw(ceil);
use Test::More;
use Test::PowShield qw(:pow :util);
use Test::PowShield::Metrics qw(scrape metric total);

###############################################################################

# The most bytes one Unix-domain socket holds: its sender's send buffer
# (the kernel counts each write's overhead too, so fewer).
my $capacity = do {
    open my $fh, '<', '/proc/sys/net/core/wmem_default'
        or plan(skip_all => 'no /proc/sys/net/core/wmem_default (not Linux)');
    0 + <$fh>;
};

# Calls of 1.8 KB: three times the socket in 1,000 of them at most.
plan(skip_all => "net.core.wmem_default is $capacity: 1,000 calls do not fill it thrice")
    if $capacity > 600_000;

my $t = Test::PowShield->new->require_redis;
my $sock = $t->testdir . '/redis.sock';
my $redis = $t->run_redis(args => ['--unixsocket', $sock, '--unixsocketperm', '777']);

# Big calls: eight limits, each counted per a key of 64 characters (the
# longest written as it is, not hashed), some 1.8 KB a call.
my $limits = join '', map {
    "            pow_shield_limit 100000 1h name=l$_ key=$_\$http_x_client;\n"
} 1 .. 8;

my %preamble = (workers => 1, main => 'worker_rlimit_nofile 4096;',
    events => 'worker_connections 2048;');
$t->write_file_expand('nginx.conf', http_conf(<<"EOF", %preamble));
    pow_shield_secret "redis-send-full-suite-secret-0123456789";
    # far beyond the test: the calls wait while Redis is stopped and paused
    pow_shield_redis unix:$sock timeout=30s;
    pow_shield_strikes off;

    server {
        %%TEST_SERVER%%

        pow_shield_key \$http_x_client;
        # Redis unavailable: 503, so that each answer says who decided
        pow_shield_fail closed;

        location / {
$limits        }

        location = /metrics {
            pow_shield_status;
        }
    }
EOF
$t->write_file('html/data.json', qq({"ok":true}\n));
$t->run;

###############################################################################

# Bytes Redis has read from its clients, but for the INFO commands that
# ask (all of them but one taken out: differences are what counts).
my ($info_bytes, $infos) = (0, 0);
sub read_by_redis {
    my ($in) = ($redis->cmd('INFO', 'stats') // '') =~ /^total_net_input_bytes:(\d+)/m
        or die 'INFO stats: ' . ($redis->error // 'no total_net_input_bytes');
    return $in - $info_bytes * $infos++;
}

# A client of the burst: keys of one length, so that calls of one size.
sub client { sprintf('%s-%06d', 'c' x 56, $_[0]) }

is($t->http_get('/data.json', 'X-Client' => client(0))->status, 200,
    'Redis answers over its Unix-domain socket');

# One INFO command's bytes, then one lone call's.
my $before = read_by_redis();
$info_bytes = read_by_redis() - $before;
my $from = read_by_redis();
$t->http_get('/data.json', 'X-Client' => client(1));
my $call = read_by_redis() - $from;
cmp_ok($call, '>', 1500, "a call of eight limits is big ($call bytes)");

# Calls for three times what the socket holds, at least, and within the
# commands a connection may have in flight (1,024).
my $burst = min(1000, ceil(3 * $capacity / $call) + 100);

my $commands = metric(scrape($t, '/metrics'), 'pow_shield_redis_commands_total');
($redis->cmd('CLIENT', 'PAUSE', 60000, 'WRITE') // '') eq 'OK'
    or die 'CLIENT PAUSE WRITE (Redis 6.2 or later): ' . ($redis->error // '?');
my $start = read_by_redis();
$redis->pause;
my @waiting = map {
    $t->send_request("GET /data.json HTTP/1.0\r\nHost: localhost\r\n"
        . 'X-Client: ' . client(100 + $_) . "\r\n\r\n")
} 1 .. $burst;

# Queued: calls for twice what the socket holds (those of checks gathered
# behind another are one command, bigger than a lone call).
my $queued;
ok(eventually(20, sub {
    $queued = metric(scrape($t, '/metrics'), 'pow_shield_redis_commands_total') - $commands;
    $queued * $call > 2 * $capacity;
}), "$burst requests queue calls for twice what the socket holds ($capacity bytes)")
    or diag("$queued commands queued");
note("$queued commands queued");
ok(!grep({ answered($_) } @waiting), '... none answered while Redis is stopped');

# Redis reads again, answers nothing: the rest goes out on the write event.
$redis->resume;
my $read;
ok(eventually(20, sub {
    $read = read_by_redis() - $start;
    $read >= $queued * $call;
}), '... then Redis reads every queued call though it answers none')
    or diag("Redis read $read bytes of $queued calls of $call bytes at least");
note("Redis read $read bytes");
ok(!grep({ answered($_) } @waiting), '... (none answered yet)');

is($redis->cmd('CLIENT', 'UNPAUSE'), 'OK', 'Redis answers again');
my @answers = map { $t->read_response($_) } @waiting;
is(statuses(@answers), join(' ', ('200') x $burst),
    '... and every request of the burst is decided by Redis');

my $m = scrape($t, '/metrics');
is(total($m, 'pow_shield_redis_errors_total'), 0, '... no Redis error counted');
is(scalar($t->error_log_lines(qr/unavailable|timed out|send\(\) failed|cannot wait/)), 0,
    '... the connection was never dropped');

$t->done_testing;
