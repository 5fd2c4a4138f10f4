#!/usr/bin/perl

# Cluster mode and nginx's request processing.  A request waiting for Redis
# is suspended and resumed later (README "Cluster mode"), so the paths that
# extend the access phase are checked with Redis deciding: pipelined
# keep-alive requests, exempt keys, a request body arriving while the
# request waits, a client going away while it waits; and the protocol
# details in cluster mode: one round trip per request, rate-limit headers
# from the sorted set, a wrong nonce neither writes to Redis nor burns the
# challenge.  (index / try_files / error_page and SSI subrequests with Redis
# deciding: pow_shield_redirect.t; dry run: pow_shield_dry_run.t.)

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use IO::Select;
use IO::Socket::INET;
use POSIX qw(ceil);
use Test::More;
use Test::PowShield qw(:pow :util :redis);
use Test::PowShield::Response;

###############################################################################

my $t = Test::PowShield->new->require_redis;
$t->run_redis;

$t->write_file_expand('nginx.conf', http_conf(<<"EOF", workers => 1));
    pow_shield_secret "cluster-requests-suite-secret-01234567";
    pow_shield_redis redis://127.0.0.1:%%REDIS_PORT%% timeout=3s;

    log_format body '\$http_x_client \$pow_shield_result [\$request_body]';

    map \$http_x_exempt \$pow_key {
        yes      "";
        default  \$http_x_client;
    }

    server {
        %%TEST_SERVER%%

        add_header X-Result \$pow_shield_result always;

        pow_shield_key \$pow_key;
        pow_shield_difficulty 1;

        location /api/ {
            pow_shield_limit 3 1h;
        }

        location /plain/ {
        }

        location /post/ {
            pow_shield_limit 3 1h;
            proxy_pass http://127.0.0.1:%%PORT_8081%%/;
            access_log %%TESTDIR%%/body.log body;
        }
    }

    server {
        listen 127.0.0.1:%%PORT_8081%%;
        server_name localhost;

        location / {
            return 200 '{"backend":true}';
        }
    }
EOF

$t->write_file('html/api/data.json', qq({"api":true}\n));
$t->write_file('html/plain/data.json', qq({"plain":true}\n));
$t->run;

###############################################################################

sub get {
    my ($client, $uri, %h) = @_;
    return $t->http_get($uri // '/api/data.json', 'X-Client' => $client, %h);
}

sub wkey { client_key($_[0], 'w', 3, 3600000) }

sub zcard { $t->redis_cmd('ZCARD', wkey(@_)) }

# Commands the module sends, executed so far (INFO commandstats also counts
# the commands run inside the script: those are left out; a spend is a
# script, the SET it runs is not a round trip of its own)
sub redis_calls { $t->redis->calls(qw(evalsha eval script select auth)) }

# one round trip per shielded request; exempt and unshielded cost nothing;
# a solution costs one more (spending it)

{
    get('warm');
    my $c0 = redis_calls();
    get('rt') for 1 .. 5;
    # the 5th is refused by the node (Redis refused the 4th until a slot
    # frees); its strike reaches Redis in the worker's next batch
    ok(eventually(5, sub { ($t->redis_cmd('GET', client_key('rt', 'o', 3, 3600000)) // 0) == 2 }),
        'both refusals counted in Redis');
    is(redis_calls() - $c0, 5,
        '5 shielded requests (3 pass, 1 refused by Redis, 1 by the node): 4 checks and 1 batch');
    $c0 = redis_calls();
    get('rt-exempt', undef, 'X-Exempt' => 'yes') for 1 .. 3;
    is($t->http_get('/plain/data.json')->status, 200, 'unshielded: 200') for 1 .. 2;
    is(redis_calls() - $c0, 0, 'exempt and unshielded requests: no Redis command');
    my %sol = solution(get('rt'));
    ok(eventually(5, sub { ($t->redis_cmd('GET', client_key('rt', 'o', 3, 3600000)) // 0) == 3 }),
        'the refusal the node decided reached Redis');
    $c0 = redis_calls();
    my $r = get('rt', undef, %sol);
    is($r->status, 200, 'solved: 200');
    is(redis_calls() - $c0, 2, 'a solved request: 2 commands (window, spend)');
}

# rate-limit headers come from the sorted set

{
    my $r = get('hdr');
    is($r->status, 200, 'headers: 200');
    is($r->header('X-RateLimit-Limit'), 3, 'X-RateLimit-Limit 3');
    is($r->header('X-RateLimit-Remaining'), 2, 'X-RateLimit-Remaining 2');
    my $z = $t->redis_cmd('ZRANGE', wkey('hdr'), 0, 0, 'WITHSCORES') || [];
    my $want = ceil((($z->[1] // 0) + 3600000) / 1000);
    ok(abs(($r->header('X-RateLimit-Reset') // 0) - $want) <= 1,
        'X-RateLimit-Reset: when the oldest entry leaves (score + window)')
        or diag($r->header('X-RateLimit-Reset') . " vs $want");
    is($r->header('RateLimit-Policy'), '"pow-shield";q=3;w=3600',
        'RateLimit-Policy');
    like($r->header('RateLimit') // '', qr/^"pow-shield";r=2;t=(3599|3600)$/,
        'RateLimit r=2, t=seconds until reset');
}

# pipelined keep-alive requests, each waiting for Redis in turn

{
    my @rs = $t->http_pipeline([('/api/data.json') x 5], 'X-Client' => 'pipe');
    is(statuses(@rs), '200 200 200 429 429',
        'five pipelined requests, limit 3: 200 200 200 429 429');
    is(join(' ', map { $_->header('X-RateLimit-Remaining') // '-' } @rs),
        '2 1 0 0 0', 'pipelined: Remaining counts down');
    is(zcard('pipe'), 3, 'pipelined: 3 entries in Redis');
}

# exempt key (empty): no Redis, no headers

{
    my @rs = map { get('exempt', undef, 'X-Exempt' => 'yes') } 1 .. 5;
    is(statuses(@rs), '200 200 200 200 200', 'exempt: never limited');
    ok(!grep({ $_->has_header('X-RateLimit-Limit') } @rs), 'exempt: no headers');
    is($rs[0]->header('X-Result'), 'exempt', 'exempt: $pow_shield_result exempt');
    my $keys = $t->redis_cmd('KEYS', 'pow:{}*') || [];
    is(scalar @$keys, 0, 'exempt: nothing in Redis');
}

# a wrong nonce: 422, no store write, the challenge is not burned

{
    my $c = (map { get('wrong') } 1 .. 4)[-1];
    is($c->status, 429, 'over the limit: 429');
    my $spent_before = scalar @{$t->redis_cmd('KEYS', 'pow:spent:*') || []};
    my $r = get('wrong', undef, solution($c, wrong => 1));
    is($r->status, 422, 'wrong nonce: 422');
    ok($r->header('X-PoW-Challenge'), '422 carries a fresh challenge');
    is(scalar @{$t->redis_cmd('KEYS', 'pow:spent:*') || []}, $spent_before,
        'wrong nonce: nothing written to Redis');
    $r = get('wrong', undef, solution($c));
    is($r->status, 200, 'then the right nonce for the same challenge: 200');
    is(scalar @{$t->redis_cmd('KEYS', 'pow:spent:*') || []}, $spent_before + 1,
        'the solution is spent in Redis');
    is(zcard('wrong'), 3, 'a solved request does not add to the window');
}

# a POST whose body arrives while the request waits for Redis: the body is
# kept and proxied once Redis answers

{
    $t->pause_redis;
    my $body = 'hello world';
    my $s = $t->send_request("POST /post/x HTTP/1.0\r\nHost: localhost\r\n"
        . "X-Client: late-body\r\nContent-Length: " . length($body) . "\r\n\r\n");
    Time::HiRes::sleep(0.3);
    ok(!answered($s), 'POST waits for the paused Redis');
    syswrite($s, $body);
    Time::HiRes::sleep(0.2);
    ok(!answered($s), 'body sent: still waiting');
    $t->resume_redis;
    my $r = $t->read_response($s);
    is($r->status, 200, 'Redis resumed: the POST passes');
    is($r->body, '{"backend":true}', 'the POST reached the backend');
    is(zcard('late-body'), 1, 'decided by Redis (one entry)');
    # nginx logs the request when it is freed, which may follow the
    # response (lingering close waits for the client to close first).
    my $log = '';
    for (1 .. 50) {
        $log = $t->read_file('body.log') // '';
        last if $log =~ /late-body/;
        Time::HiRes::sleep(0.1);
    }
    like($log, qr/^late-body pass \[hello world\]$/m,
        'the request body was kept while waiting and proxied');
}

# a POST over the limit on a keep-alive connection: the body is discarded,
# the next request on the connection is served

{
    get('post-ka', '/post/x') for 1 .. 3;
    my $evil = "GET /api/evil.json HTTP/1.1\r\nHost: localhost\r\n\r\n";
    my $req = "POST /post/x HTTP/1.1\r\nHost: localhost\r\nX-Client: post-ka\r\n"
        . "Content-Length: " . length($evil) . "\r\n\r\n$evil"
        . "GET /api/data.json HTTP/1.1\r\nHost: localhost\r\n"
        . "X-Client: post-ka-2\r\nConnection: close\r\n\r\n";
    my @rs = Test::PowShield::Response->split_stream($t->http($req)->raw);
    is(statuses(@rs), '429 200', 'keep-alive POST over the limit: 429, then the next request');
    ok(!grep({ /evil/ } split /\n/, $t->read_file('access.log')),
        'the body of the refused POST was not run as a request');
}

# clients that go away while their request waits: nothing breaks when Redis
# answers for requests that are gone

{
    $t->pause_redis;
    for (1 .. 3) {
        my $s = $t->send_request("GET /api/data.json HTTP/1.0\r\nHost: localhost\r\n"
            . "X-Client: gone\r\n\r\n");
        close $s;
    }
    my $s = $t->send_request("GET /api/data.json HTTP/1.0\r\nHost: localhost\r\n"
        . "X-Client: stays\r\n\r\n");
    Time::HiRes::sleep(0.3);
    $t->resume_redis;
    my $r = $t->read_response($s);
    is($r->status, 200, 'the client that stayed is answered');
    is(zcard('stays'), 1, '... by Redis');
    is(get('after-gone')->status, 200, 'the worker keeps serving');
    ok(!$t->error_log_lines(qr/exited on signal|\[alert\]|\[crit\]/),
        'no crash, no alert');
}

###############################################################################

$t->done_testing;
