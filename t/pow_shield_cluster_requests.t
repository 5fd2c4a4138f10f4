#!/usr/bin/perl

# Cluster mode and nginx's request processing.  A request waiting for Redis
# is suspended and resumed later (docs/directives.md, pow_shield_redis), so what only that
# wait has is checked here, with Redis deciding: one round trip per
# request (exempt and unshielded requests none, a solution one more), a
# request body arriving while the request waits, clients going away while
# theirs wait.  (What both modes do alike, in both: pipelined keep-alive
# requests, exempt keys and the rate-limit headers from the sorted set:
# pow_shield_green.t; a wrong nonce writes nothing and does not burn the
# challenge: pow_shield_verify.t; a refused POST's body on a keep-alive
# connection: pow_shield_challenge.t; index / try_files / error_page and SSI
# subrequests: pow_shield_redirect.t; dry run: pow_shield_dry_run.t.)

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use IO::Select;
use IO::Socket::INET;
use Test::More;
use Test::PowShield qw(:pow :util :redis);

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
