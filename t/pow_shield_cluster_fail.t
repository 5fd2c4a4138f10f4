#!/usr/bin/perl

# Cluster mode when Redis dies (docs/operations.md, "Choosing a fail policy"; docs/directives.md,
# pow_shield_fail): requests are decided at once by pow_shield_fail -- local (the
# shared-memory bucket and replay cache), open (pass), closed (503 with
# Retry-After, except trusted requests); no other policy answers 5xx.  The
# failure and the recovery are logged once per transition, not per request.
# Redis restarted on the same port decides again within seconds.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use IO::Socket::INET;
use Time::HiRes;
use POSIX ();
use Test::More;
use Test::PowShield qw(:pow :util :redis);

###############################################################################

my $t = Test::PowShield->new->require_redis;
$t->run_redis;

# one worker: "once per transition" means exactly one line
my $conf = http_conf(<<'EOF', workers => 1);
    # This suite is about pow_shield_fail, not the circuit breaker (whose
    # blocks, made by the fallback while Redis is down, hold until they end).
    pow_shield_strikes off;

    pow_shield_secret "cluster-fail-suite-secret-0123456789ab";
    pow_shield_redis redis://127.0.0.1:%%REDIS_PORT%%;

    server {
        %%TEST_SERVER%%

        add_header X-Result $pow_shield_result always;

        pow_shield_key $http_x_client;
        pow_shield_difficulty 1;
        pow_shield_limit 3 1h;

        location /default/ {
        }

        location /local/ {
            pow_shield_fail local;
        }

        location /open/ {
            pow_shield_fail open;
        }

        location /closed/ {
            pow_shield_fail closed;
        }

        location /trusted/ {
            pow_shield_fail closed trusted=$http_x_trusted;
        }

        location /plain/ {
            pow_shield_limit off;
        }
    }

    server {
        listen 127.0.0.1:%%PORT_8081%%;
        server_name localhost;

        root %%TESTDIR%%/html;

        pow_shield_key $http_x_client;
        pow_shield_limit 3 1h;
        pow_shield_fail closed;

        location /closed/ {
        }

        location /local/ {
            pow_shield_fail local;
        }
    }
EOF

$t->write_file_expand('nginx.conf', $conf);
$t->write_file("html/$_/data.json", qq({"dir":"$_"}\n))
    for qw(default local open closed trusted plain);
$t->run;

###############################################################################

my @all;    # every response while Redis is down: [location, status]

sub get {
    my ($loc, $client, %h) = @_;
    my $r = $t->http_get("/$loc/data.json", 'X-Client' => $client, %h);
    push @all, [$loc, $r->status // 'none'];
    return $r;
}

# Keeps one worker busy: $procs processes, $conns keep-alive connections
# each, sending /closed/ requests for $secs seconds. Returns the number of
# responses and a histogram of their Retry-After values.
sub closed_load {
    my ($procs, $conns, $secs) = @_;
    my @pipes;
    for (1 .. $procs) {
        pipe(my $rd, my $wr) or die "pipe: $!";
        my $pid = fork // die "fork: $!";
        if ($pid == 0) {
            close $rd;
            my %seen;
            my $connect = sub {
                IO::Socket::INET->new(PeerAddr => '127.0.0.1:' . $t->port(8080),
                    Proto => 'tcp') or die "connect: $!";
            };
            my @c = map { $connect->() } 1 .. $conns;
            my $req = "GET /closed/data.json HTTP/1.1\r\nHost: localhost\r\n"
                . "X-Client: C\r\n\r\n";
            my $until = Time::HiRes::time() + $secs;
            while (Time::HiRes::time() < $until) {
                syswrite($_, $req) for @c;
                for my $s (@c) {
                    my $raw = '';
                    while ($raw !~ /\r\n\r\n/ || length($raw) < head_and_body($raw)) {
                        sysread($s, $raw, 65536, length $raw) or last;
                    }
                    # keepalive_requests reached: nginx closed; reconnect
                    ($s = $connect->()), next if $raw eq '';
                    $seen{$raw =~ /^Retry-After: *(\S+)/mi ? $1 : 'none'}++;
                }
            }
            print $wr map { "$_ $seen{$_}\n" } keys %seen;
            close $wr;
            POSIX::_exit(0);
        }
        close $wr;
        push @pipes, [$pid, $rd];
    }
    my ($n, %seen) = (0);
    for (@pipes) {
        my ($pid, $rd) = @$_;
        while (<$rd>) {
            my ($v, $count) = split;
            $seen{$v} += $count;
            $n += $count;
        }
        waitpid $pid, 0;
    }
    return ($n, %seen);
}

# Length of a whole response (head and Content-Length body) in $raw.
sub head_and_body {
    my ($raw) = @_;
    my $head = index($raw, "\r\n\r\n") + 4;
    my ($len) = substr($raw, 0, $head) =~ /^Content-Length: *(\d+)/mi;
    return $head + ($len // 0);
}

sub wkey { client_key($_[0], 'w', 3, 3600000) }

# Redis up: Redis decides

my $r = get('local', 'up');
is($r->status, 200, 'Redis up: 200');
is($t->redis_cmd('ZCARD', wkey('up')), 1, 'Redis up: counted in Redis');
is($t->redis_unavailable_count, 0, 'Redis up: no "unavailable" line');

# Redis killed

$t->kill_redis;
@all = ();

# local (explicit and default): the shared-memory bucket of this node
# decides, with the same protocol

for my $loc (qw(local default)) {
    my @rs = map { get($loc, "L-$loc") } 1 .. 4;
    is(statuses(@rs), '200 200 200 429',
        "Redis down, fail $loc: the local bucket admits 3, then 429");
    is($rs[1]->header('X-RateLimit-Remaining'), 1,
        "fail $loc: rate-limit headers from the local bucket");
    is($rs[3]->header('X-Result'), 'challenge', "fail $loc: 429 is a challenge");
    ok($rs[3]->header('X-PoW-Challenge'), "fail $loc: 429 carries X-PoW-Challenge");
    my %sol = solution($rs[3]);
    $r = get($loc, "L-$loc", %sol);
    is($r->status, 200, "fail $loc: a solution is accepted (local replay cache)");
    $r = get($loc, "L-$loc", %sol);
    is($r->status, 409, "fail $loc: replayed: 409");
}

# open: requests pass, without rate-limit headers

{
    my @rs = map { get('open', 'O') } 1 .. 10;
    is(statuses(@rs), join(' ', ('200') x 10),
        'Redis down, fail open: 10 requests of a limit-3 client pass');
    ok(!grep({ $_->has_header('X-RateLimit-Limit') } @rs),
        'fail open: no rate-limit headers');
}

# closed: 503 with Retry-After and the JSON error

{
    $r = get('closed', 'C');
    is($r->status, 503, 'Redis down, fail closed: 503');
    like($r->header('Retry-After') // '', qr/^[1-9]\d*$/,
        'fail closed: Retry-After, whole seconds >= 1');
    like($r->header('Content-Type') // '', qr{^application/json\b},
        'fail closed: application/json');
    my $j = $r->json // {};
    is($j->{error}, 'Rate limiter unavailable',
        'fail closed: "error":"Rate limiter unavailable"');
    is_deeply([@$j{qw(type status)}],
        ['https://iana.org/assignments/http-problem-types#temporary-reduced-capacity', 503],
        'fail closed: a temporary-reduced-capacity problem, status 503');
    is($r->header('X-Result'), 'unavailable',
        'fail closed: $pow_shield_result unavailable');
    ok(!$r->has_header('X-PoW-Challenge'), 'fail closed: no challenge');

    # Retry-After is the time until Redis is tried again: the back-off is at
    # most 2 s. Requests handled in the very loop iteration where the
    # reconnect timer falls due (nginx expires timers after handling events)
    # must not get a wrapped-around value: pipelined batches keep the worker
    # busy across those moments.
    my ($n, %seen) = closed_load(3, 32, 2.5);
    is_deeply([grep { !/^[12]$/ } sort keys %seen], [],
        "fail closed: Retry-After is 1 or 2 in all $n requests over 2.5 s");
}

# closed with trusted=: non-empty and not "0" passes; empty, absent, "0"
# are refused

{
    my %case = ('1' => 200, 'yes' => 200, 'key-abc' => 200, '00' => 200,
        '0' => 503, '' => 503);
    for my $v (sort keys %case) {
        $r = get('trusted', "T-$v", 'X-Trusted' => $v);
        is($r->status, $case{$v}, "fail closed trusted=\$http_x_trusted \"$v\": $case{$v}");
    }
    $r = get('trusted', 'T-none');
    is($r->status, 503, 'fail closed trusted=: header absent: 503');
    my @rs = map { get('trusted', 'T-many', 'X-Trusted' => 'yes') } 1 .. 5;
    is(statuses(@rs), '200 200 200 200 200',
        'trusted requests are not limited while Redis is down');
}

# inheritance: server-level "closed", overridden in a location

$r = $t->http_get('/closed/data.json', 'X-Client' => 'S', -port => 8081);
push @all, ['closed', $r->status // 'none'];
is($r->status, 503, 'pow_shield_fail closed at server level: inherited (503)');
$r = $t->http_get('/local/data.json', 'X-Client' => 'S', -port => 8081);
push @all, ['local', $r->status // 'none'];
is($r->status, 200, 'overridden with local in the location: 200');

# an unshielded location is not affected

is(get('plain', 'P')->status, 200, 'Redis down: unshielded location 200');

# no 5xx except under "closed"; no request was lost

is(join(' ', map { "$_->[0]:$_->[1]" }
        grep { $_->[1] !~ /^\d+$/ || ($_->[1] >= 500 && $_->[0] !~ /closed|trusted/) }
        @all), '', 'Redis down: no 5xx and no lost response except "closed"');
ok(scalar(@all) > 30, 'premise: many requests while Redis was down');

# logged once, not per request, even after back-off retries

Time::HiRes::sleep(1);      # several reconnect attempts (100 ms, doubling)
get('open', 'O') for 1 .. 5;
is($t->redis_unavailable_count, 1, 'the failure is logged once (one worker), not per request');
my ($line) = $t->error_log_lines(qr/pow_shield: redis \S+ unavailable/);
like($line // '', qr/127\.0\.0\.1:\d+/, 'the line names the Redis address');
like($line // '', qr/\(.+\)/, 'the line gives the reason')
    or diag($line);
is($t->redis_available_again_count, 0, 'no recovery logged yet');

# Redis restarted on the same port: Redis decides again within seconds

$t->restart_redis;
ok(eventually(10, sub {
        get('local', 'back');
        $t->redis_cmd('EXISTS', wkey('back'));
    }), 'Redis restarted: requests are counted in Redis again');
is($t->redis_available_again_count, 1, 'recovery logged once ("is available again")');

# the client exhausted in the local bucket is decided by Redis again (the
# restarted Redis knows nothing of it)
$r = get('local', 'L-local');
is($r->status, 200, 'after recovery: Redis decides (local bucket ignored)');
is($t->redis_cmd('ZCARD', wkey('L-local')), 1, '... counted in Redis');

my @rs = map { get('local', 'again') } 1 .. 4;
is(statuses(@rs), '200 200 200 429', 'after recovery: counts resume in Redis');
is($t->redis_cmd('ZCARD', wkey('again')), 3, '... 3 entries');
is(get('closed', 'C')->status, 200, 'after recovery: fail closed location 200');
ok(get('open', 'O2')->has_header('X-RateLimit-Limit'),
    'after recovery: fail open location has rate-limit headers again');

# a second outage is a second transition: one more line each way

$t->kill_redis;
get('open', "second-$_") for 1 .. 10;
is($t->redis_unavailable_count, 2, 'second outage: one more "unavailable" line');
$t->restart_redis;
ok(eventually(10, sub {
        get('local', 'back2');
        $t->redis_cmd('EXISTS', wkey('back2'));
    }), 'second restart: Redis decides again');
is($t->redis_available_again_count, 2, 'second recovery: one more "available again" line');

# an error reply (here WRONGTYPE: the client's key is not a sorted set) is
# decided by the fail policy too, and is not a 5xx

$t->redis_cmd('SET', wkey('wrongtype'), 'x');
$r = get('local', 'wrongtype');
is($r->status, 200, 'error reply from the script: decided by fail local (200)');
ok(scalar $t->error_log_lines(qr/pow_shield: redis .*WRONGTYPE/),
    'error reply: logged with the Redis error');
ok(eventually(10, sub {
        get('local', 'back3');
        $t->redis_cmd('EXISTS', wkey('back3'));
    }), 'after an error reply: Redis decides again');

# reload while Redis is down: the new worker falls back at once, and uses
# Redis again when it comes back

$t->kill_redis;
ok($t->reload, 'reload while Redis is down');
{
    my @rs = map { get('local', 'reload-down') } 1 .. 4;
    is(statuses(@rs), '200 200 200 429',
        'after reload, Redis down: the local bucket decides');
    is(get('closed', 'reload-down-c')->status, 503,
        'after reload, Redis down: fail closed 503');
}
$t->restart_redis;
ok(eventually(10, sub {
        get('local', 'reload-back');
        $t->redis_cmd('EXISTS', wkey('reload-back'));
    }), 'after reload, Redis restarted: Redis decides again');

# nginx started while Redis is not running yet (cold start): requests are
# decided by the fail policy until Redis starts, then Redis decides

my $cold = Test::PowShield->new;
# the port its Redis will have (run_redis uses port 6379 of the instance)
(my $cconf = $conf) =~ s/%%REDIS_PORT%%/%%PORT_6379%%/;
$cold->write_file_expand('nginx.conf', $cconf);
$cold->write_file("html/$_/data.json", qq({"dir":"$_"}\n))
    for qw(default local open closed trusted plain);
$cold->run;

{
    my @rs = map { $cold->http_get('/local/data.json', 'X-Client' => 'cold') } 1 .. 4;
    is(statuses(@rs), '200 200 200 429',
        'cold start without Redis: the local bucket decides');
    is($cold->http_get('/closed/data.json', 'X-Client' => 'cold-c')->status, 503,
        'cold start without Redis: fail closed 503');
    is($cold->redis_unavailable_count, 1,
        'cold start without Redis: logged once');
}
$cold->run_redis;
ok(eventually(10, sub {
        $cold->http_get('/local/data.json', 'X-Client' => 'cold-up');
        $cold->redis_cmd('EXISTS', wkey('cold-up'));
    }), 'Redis started later: Redis decides');
is($cold->redis_available_again_count, 1,
    'Redis started later: logged once');

# Redis is retried with back-off, not on every request: a "Redis" that
# accepts connections and never answers (the test holds the listening
# socket; the kernel completes the connects) sees a handful of connection
# attempts while 100 requests are decided by the fail policy

{
    my $hole = Test::PowShield->new;
    my $listener = IO::Socket::INET->new(LocalAddr => '127.0.0.1',
        LocalPort => $hole->port(6390), Listen => 1024, ReuseAddr => 1,
        Proto => 'tcp') or die "listen: $!";
    (my $hconf = $conf) =~ s/%%REDIS_PORT%%/%%PORT_6390%%/;
    $hole->write_file_expand('nginx.conf', $hconf);
    $hole->write_file("html/$_/data.json", qq({"dir":"$_"}\n))
        for qw(default local open closed trusted plain);
    $hole->run;

    my @rs = map { $hole->http_get('/open/data.json', 'X-Client' => "bh$_") } 1 .. 100;
    Time::HiRes::sleep(1.5);    # background retries go on meanwhile
    push @rs, map { $hole->http_get('/open/data.json', 'X-Client' => "bh$_") } 1 .. 100;
    is(scalar(grep { ($_->status // 0) == 200 } @rs), 200,
        'black-hole Redis: 200 requests decided by fail open');
    $listener->blocking(0);
    my $attempts = 0;
    while (my $c = $listener->accept) {
        $attempts++;
        close $c;
    }
    ok($attempts >= 2, "black-hole Redis: retried in the background ($attempts attempts)");
    ok($attempts < 20,
        "black-hole Redis: $attempts connection attempts for 200 requests (back-off)");
    is(scalar(my @l = $hole->error_log_lines(qr/pow_shield: redis \S+ unavailable/)),
        1, 'black-hole Redis: logged once');
    like($l[0] // '', qr/handshake|timed out|time/i,
        'black-hole Redis: the line says Redis did not answer') or diag($l[0]);
    $hole->stop;
    ok($hole->stopped_gracefully, 'black-hole Redis: QUIT stops nginx by itself');
    close $listener;
}

# graceful stop while Redis is down (a reconnect is scheduled): no alert,
# and nginx exits by itself

$cold->kill_redis;
$cold->http_get('/open/data.json', 'X-Client' => 'bye') for 1 .. 3;
$cold->stop;
ok($cold->stopped_gracefully, 'QUIT while Redis is down: nginx exits by itself');
ok(!grep({ /\[alert\]|\[crit\]|exited on signal/ } $cold->error_log_lines),
    'QUIT while Redis is down: no alert');

###############################################################################

$t->done_testing;
