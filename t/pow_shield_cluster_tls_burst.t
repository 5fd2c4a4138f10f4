#!/usr/bin/perl

# Cluster mode over TLS, a burst while Redis is frozen (docs/operations.md
# "Redis over TLS"): the commands of concurrent requests queue in one
# output buffer that grows (and moves) while the socket is full; OpenSSL
# is told the retried write may come from a moved buffer, so once Redis
# reads again every request is decided by Redis, none dropped with a "bad
# write retry".
#
# Loopback socket buffers hold megabytes, more than the 1024 commands a
# connection may have in flight: the suite runs in a network namespace of
# its own (unshare -n, as root) whose TCP buffers are 8 KB, so that a few
# dozen requests fill them. Skipped where that is not possible.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

BEGIN {
    # Re-run in a private network namespace with small TCP buffers (its
    # sysctls are its own: the machine's are not touched).
    if (!$ENV{POW_SHIELD_NETNS} && $> == 0
        && system('unshare -n true >/dev/null 2>&1') == 0
        && system('command -v ip >/dev/null 2>&1') == 0)
    {
        $ENV{POW_SHIELD_NETNS} = 1;
        exec 'unshare', '-n', 'sh', '-c',
            'ip link set lo up && sysctl -q -w net.ipv4.tcp_wmem="4096 8192 8192"'
            . ' net.ipv4.tcp_rmem="4096 8192 8192" && exec "$0" "$@"',
            $^X, (map { "-I$_" } @INC), $0;
    }
}

use Test::More;
use Test::PowShield qw(:pow :util);

###############################################################################

plan(skip_all => 'needs root and unshare -n (a network namespace with small buffers)')
    unless $ENV{POW_SHIELD_NETNS};
my $t = Test::PowShield->new->require_redis;
plan(skip_all => 'openssl command not found') unless `openssl version 2>/dev/null`;

my $dir = $t->testdir;
system("openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes"
    . " -keyout $dir/server.key -out $dir/server.pem -days 2 -subj /CN=redis.test"
    . " >$dir/openssl.log 2>&1") == 0 or die "openssl failed; see $dir/openssl.log";

my $redis = $t->run_redis(tls => { cert => "$dir/server.pem", key => "$dir/server.key",
    ca => "$dir/server.pem", auth_clients => 'no' });

$t->write_file_expand('nginx.conf', http_conf(<<'EOF', workers => 1));
    pow_shield_secret "cluster-tls-burst-suite-secret-012345";
    pow_shield_redis rediss://127.0.0.1:%%REDIS_TLS_PORT%% tls_verify=off timeout=10s;
    pow_shield_strikes off;

    server {
        %%TEST_SERVER%%

        pow_shield_key $http_x_client;
        pow_shield_limit 3 1h;
        # Redis unavailable: 503, so that each answer says who decided
        pow_shield_fail closed;

        location / {
        }
    }
EOF
$t->write_file('html/data.json', qq({"ok":true}\n));
$t->run;

###############################################################################

is($t->http_get('/data.json', 'X-Client' => 'warm')->status, 200,
    'rediss:// answers (the connection is up)');

my $burst = 200;
$redis->pause;
my @waiting = map {
    $t->send_request("GET /data.json HTTP/1.0\r\nHost: localhost\r\n"
        . "X-Client: burst-$_\r\n\r\n")
} 1 .. $burst;
# every request has reached nginx's output buffer (it answers nothing yet)
Time::HiRes::sleep(0.5);
ok(!grep({ answered($_) } @waiting), "$burst requests wait while Redis is frozen");
$redis->resume;

my @answers = map { $t->read_response($_) } @waiting;
is(statuses(@answers), join(' ', ('200') x $burst),
    '... and once it reads again, every one is decided by Redis');
is(scalar($t->error_log_lines(qr/unavailable|bad write retry/)), 0,
    '... the connection was never dropped');

$t->done_testing;
