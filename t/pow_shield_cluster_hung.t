#!/usr/bin/perl

# Cluster mode with a hung Redis (SIGSTOP: the socket accepts bytes, nothing
# answers).  docs/operations.md: Redis I/O never blocks the worker.  With one
# worker, an unshielded request is answered while shielded requests wait for
# Redis; the waiting requests are decided by pow_shield_fail when the reply
# deadline passes (timeout=), and later ones at once while Redis is down.
# After SIGCONT Redis decides again.  A graceful stop while a request waits
# on the hung Redis answers it and leaves no alert.
#
# No durations are asserted: only the order in which responses arrive and
# their outcomes.  timeout=2s keeps shielded requests waiting long enough
# for that order to be unambiguous.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use IO::Select;
use IO::Socket::INET;
use Test::More;
use Test::PowShield qw(:pow :util :redis);
use Test::PowShield::Response;

###############################################################################

my $t = Test::PowShield->new->require_redis;
$t->run_redis;

my $conf = http_conf(<<'EOF', workers => 1);
    pow_shield_secret "cluster-hung-suite-secret-0123456789ab";
    pow_shield_redis redis://127.0.0.1:%%REDIS_PORT%% timeout=2s connect_timeout=1s;

    server {
        %%TEST_SERVER%%

        add_header X-Result $pow_shield_result always;

        pow_shield_key $http_x_client;
        pow_shield_difficulty 1;
        pow_shield_limit 3 1h;

        location /local/ {
        }

        location /open/ {
            pow_shield_fail open;
        }

        location /closed/ {
            pow_shield_fail closed;
        }

        location /plain/ {
            pow_shield_limit off;
        }
    }
EOF

$t->write_file_expand('nginx.conf', $conf);
$t->write_file("html/$_/data.json", qq({"dir":"$_"}\n))
    for qw(local open closed plain);
$t->run;

# a second node on the same Redis with the default timeouts (50ms/100ms)
my $d = Test::PowShield->new;
$d->use_redis($t->redis);
(my $dconf = $conf) =~ s/ timeout=2s connect_timeout=1s//;
$d->write_file_expand('nginx.conf', $dconf);
$d->write_file("html/$_/data.json", qq({"dir":"$_"}\n))
    for qw(local open closed plain);
$d->run;

###############################################################################

# Send a request and return the socket without reading the response.
sub send_req {
    my ($loc, $client) = @_;
    return $t->send_request("GET /$loc/data.json HTTP/1.0\r\nHost: localhost\r\n"
        . "X-Client: $client\r\n\r\n");
}

sub wkey { client_key($_[0], 'w', 3, 3600000) }

# Redis up: the worker's connection is open

is($t->http_get('/local/data.json', 'X-Client' => 'warm')->status, 200,
    'Redis up: 200');
is($t->redis_cmd('ZCARD', wkey('warm')), 1, 'Redis up: counted in Redis');

# Redis hung: shielded requests wait, the worker keeps serving

$t->pause_redis;

my @local = map { send_req('local', 'hung-local') } 1 .. 5;
# two clients that go away while waiting (their slots time out later)
close $_ for map { send_req('local', 'hung-gone') } 1 .. 2;
my $closed = send_req('closed', 'hung-closed');
my $open = send_req('open', 'hung-open');
my @waiting = (@local, $closed, $open);
Time::HiRes::sleep(0.3);    # let the worker read them and ask Redis

my $plain = $t->http_get('/plain/data.json', -timeout => 10);
is($plain->status, 200,
    'Redis hung: an unshielded request on the same worker is answered');
is(scalar(grep { answered($_) } @waiting), 0,
    '... while the 7 shielded requests are still waiting for Redis');

my $plain2 = $t->http_get('/plain/data.json', -timeout => 10);
is($plain2->status, 200, '... and another one');
is(scalar(grep { answered($_) } @waiting), 0, '... they still wait');

# at the deadline the fail policy decides every waiting request

my @rl = map { $t->read_response($_) } @local;
is(statuses(@rl), '200 200 200 429 429',
    'hung Redis, fail local: the waiting requests are decided by the local bucket');
ok($rl[3]->header('X-PoW-Challenge'), '... the 429s carry a challenge');
my $rc = $t->read_response($closed);
is($rc->status, 503, 'hung Redis, fail closed: 503');
is(($rc->json // {})->{error}, 'Rate limiter unavailable', '... JSON error');
ok(($rc->header('Retry-After') // 0) >= 1, '... Retry-After');
is($t->read_response($open)->status, 200, 'hung Redis, fail open: 200');

is($t->redis_unavailable_count, 1, 'hung Redis: the failure is logged once');
ok(!$t->error_log_lines(qr/exited on signal|\[alert\]|\[crit\]/),
    'requests gone before the deadline: no crash, no alert');
ok(scalar $t->error_log_lines(qr/pow_shield: redis \S+ unavailable \(.*time/),
    'the line says the reply timed out')
    or diag(join "\n", $t->error_log_lines(qr/pow_shield: redis/));

# while Redis is known to be down, requests are decided at once by the
# policy: a shielded request sent first is answered before an unshielded
# request sent after it gets its answer read (no new wait on Redis)

{
    my $s = send_req('local', 'while-down');
    my $r = $t->read_response($s);
    is($r->status, 200, 'still hung, fail local: 200');
    is($r->header('X-RateLimit-Remaining'), 2, '... from the local bucket');
    my @rs = map { $t->http_get('/closed/data.json', 'X-Client' => 'wd') } 1 .. 3;
    is(statuses(@rs), '503 503 503', 'still hung, fail closed: 503 each time');
    is($t->http_get('/plain/data.json')->status, 200,
        'still hung: unshielded 200');
}

# the node with the default timeout=50ms: the same outcomes

{
    my @rs = map { $d->http_get('/local/data.json', 'X-Client' => 'dflt') } 1 .. 4;
    is(statuses(@rs), '200 200 200 429',
        'default timeout, hung Redis, fail local: local bucket decides');
    is($d->http_get('/closed/data.json', 'X-Client' => 'dflt')->status, 503,
        'default timeout, hung Redis, fail closed: 503');
    is($d->http_get('/open/data.json', 'X-Client' => 'dflt')->status, 200,
        'default timeout, hung Redis, fail open: 200');
    ok($d->redis_unavailable_count,
        'default timeout: the failure is logged');
}

# SIGCONT: Redis decides again

$t->resume_redis;
ok(eventually(15, sub {
        $t->http_get('/local/data.json', 'X-Client' => 'resumed');
        $t->redis_cmd('EXISTS', wkey('resumed'));
    }), 'after SIGCONT: requests are counted in Redis again');
is($t->redis_available_again_count, 1, 'recovery logged once');

{
    my @rs = map { $t->http_get('/local/data.json', 'X-Client' => 'fresh') } 1 .. 4;
    is(statuses(@rs), '200 200 200 429', 'after SIGCONT: counts in Redis');
    is($t->redis_cmd('ZCARD', wkey('fresh')), 3, '... 3 entries');
    is($t->http_get('/closed/data.json', 'X-Client' => 'fresh2')->status, 200,
        'after SIGCONT: fail closed location 200');
}

ok(eventually(15, sub {
        $d->http_get('/local/data.json', 'X-Client' => 'resumed-d');
        $t->redis_cmd('EXISTS', wkey('resumed-d'));
    }), 'after SIGCONT: the default-timeout node uses Redis again');

# Redis dies (connection lost) while requests wait on it: every waiting
# request is decided by the fail policy, none is lost or answered 5xx

$t->pause_redis;
{
    my @w = map { send_req('local', 'reset') } 1 .. 3;
    my $wc = send_req('closed', 'reset-c');
    Time::HiRes::sleep(0.3);
    is(scalar(grep { answered($_) } @w, $wc), 0, 'hung: 4 requests wait');
    $t->kill_redis;
    my @rs = map { $t->read_response($_) } @w;
    is(statuses(@rs), '200 200 200', 'Redis killed while they wait: fail local decides');
    is($t->read_response($wc)->status, 503, '... fail closed: 503');
    is($t->http_get('/plain/data.json')->status, 200, '... unshielded: 200');
}
is($t->redis_unavailable_count, 2, 'one more "unavailable" line for the second outage');
$t->restart_redis;
ok(eventually(15, sub {
        $t->http_get('/local/data.json', 'X-Client' => 'restarted');
        $t->redis_cmd('EXISTS', wkey('restarted'));
    }), 'Redis restarted: decides again');

# reload while a request waits on a hung Redis: the old worker answers it
# (fail policy) before it exits; the new worker serves, and uses Redis again
# after SIGCONT

$t->pause_redis;
{
    my $s = send_req('local', 'at-reload');
    Time::HiRes::sleep(0.3);
    ok(!answered($s), 'hung: a shielded request waits');
    ok($t->reload, 'reload while it waits');
    is($t->read_response($s)->status, 200, 'the waiting request is answered (fail local)');
    is($t->http_get('/plain/data.json')->status, 200, 'new worker: unshielded 200');
    my @rs = map { send_req('local', 'new-worker') } 1 .. 4;
    is(statuses(map { $t->read_response($_) } @rs), '200 200 200 429',
        'new worker, Redis hung: decided by the local bucket');
}
$t->resume_redis;
ok(eventually(15, sub {
        $t->http_get('/local/data.json', 'X-Client' => 'after-reload');
        $t->redis_cmd('EXISTS', wkey('after-reload'));
    }), 'after SIGCONT: the new worker uses Redis');

# graceful stop (QUIT) while a request waits on a hung Redis: the request is
# answered (by the fail policy), the worker exits, no alert

$t->pause_redis;
my $last = send_req('local', 'at-quit');
Time::HiRes::sleep(0.3);
ok(!answered($last), 'hung again: the shielded request waits');
$t->stop;
ok($t->stopped_gracefully, 'QUIT while waiting on a hung Redis: nginx exits by itself');
my $r = $t->read_response($last);
is($r->status, 200, 'QUIT while waiting on Redis: the request was answered (fail local)');
ok(!grep({ /\[alert\]|\[crit\]|exited on signal/ } $t->error_log_lines),
    'QUIT with a pending Redis request: no alert, no crash');
$t->resume_redis;

###############################################################################

$t->done_testing;
