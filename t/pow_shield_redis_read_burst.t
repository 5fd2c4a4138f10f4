#!/usr/bin/perl

# Replies that arrive together, more than one receive holds (16 KB): the
# worker reads on after a receive that filled its room, so every request
# is decided by Redis at once (nginx's ready flag after a full read says
# more may be there; with edge-triggered epoll no new event comes for
# bytes that arrived before the last one).  The worker is stopped while a
# resumed Redis answers 400 calls, so its socket holds all their replies
# (some 30 KB) when it runs again.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Test::PowShield qw(:pow :util);

my $t = Test::PowShield->new->require_redis;
my $tls = $ENV{BURST_TLS};
my $dir = $t->testdir;
if ($tls) {
    system("openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes"
        . " -keyout $dir/server.key -out $dir/server.pem -days 2 -subj /CN=redis.test"
        . " >$dir/openssl.log 2>&1") == 0 or die "openssl failed";
    $t->run_redis(tls => { cert => "$dir/server.pem", key => "$dir/server.key",
        ca => "$dir/server.pem", auth_clients => 'no' });
} else {
    $t->run_redis;
}
my $url = $tls ? 'rediss://127.0.0.1:%%REDIS_TLS_PORT%% tls_verify=off'
    : 'redis://127.0.0.1:%%REDIS_PORT%%';

$t->write_file_expand('nginx.conf', http_conf(<<"EOF", workers => 1, events => 'worker_connections 4096;'));
    pow_shield_secret "redis-read-burst-suite-secret-0123456789";
    pow_shield_redis $url timeout=4s;
    pow_shield_strikes off;

    server {
        %%TEST_SERVER%%

        pow_shield_key \$http_x_client;
        pow_shield_limit 3 1h;
        # Redis unavailable: 503, so that each answer says who decided
        pow_shield_fail closed;

        location / {
        }
    }
EOF
$t->write_file('html/data.json', qq({"ok":true}\n));
$t->run;

is($t->http_get('/data.json', 'X-Client' => 'warm')->status, 200, 'Redis answers');

my $burst = $ENV{BURST_N} // 400;
my ($worker) = $t->worker_pids;
$t->pause_redis;
my @waiting = map {
    $t->send_request("GET /data.json HTTP/1.0\r\nHost: localhost\r\n"
        . "X-Client: burst-$_\r\n\r\n")
} 1 .. $burst;
Time::HiRes::sleep(0.5);                # the calls wait in Redis's socket
kill 'STOP', $worker;
$t->resume_redis;
Time::HiRes::sleep(0.5);                # their replies in the worker's
my $woke = Time::HiRes::time();
kill 'CONT', $worker;
my @answers = map { $t->read_response($_) } @waiting;
my $took = Time::HiRes::time() - $woke;

is(statuses(@answers), join(' ', ('200') x $burst),
    'every request of the burst is decided by Redis');
cmp_ok($took, '<', 2, '... at once, not after the 4 s timeout');
is(scalar($t->error_log_lines(qr/unavailable|timed out/)), 0,
    '... the connection was never dropped');

$t->done_testing;
