#!/usr/bin/perl

# The circuit breaker (red zone, docs/directives.md, pow_shield_strikes) in cluster mode: strikes
# live in Redis, written by the limiter's own script call (or the strike
# script for traps), so no strike is lost under concurrency and every node
# sees a block; a node keeps a block it learnt in its zone and answers it
# without Redis; with Redis gone, pow_shield_fail local strikes in the zone.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Digest::SHA qw(sha256_hex);
use Test::More;
use Test::PowShield qw(:pow :util);
use Time::HiRes qw(sleep);

###############################################################################

my $conf = <<'EOF';
%%TEST_GLOBALS%%

worker_processes 2;

events {
}

http {
    %%TEST_GLOBALS_HTTP%%

    default_type application/json;

    pow_shield_secret "cluster-red-suite-secret-0123456789abcd";
    pow_shield_redis redis://127.0.0.1:%%REDIS_PORT%% timeout=3s;

    server {
        listen 127.0.0.1:%%PORT_8080%%;
        server_name localhost;

        root %%TESTDIR%%/html;

        add_header X-Result $pow_shield_result always;
        add_header X-Strikes $pow_shield_strikes always;

        pow_shield_key $http_x_client;
        pow_shield_difficulty 1;

        # the defaults: pow_shield_strikes 5 60s, block status 403
        location /api/ {
            pow_shield_limit 1 1h;
        }

        location /other/ {
            pow_shield_limit 100 1h;
        }

        # no pow_shield_limit
        location /trap/ {
            pow_shield_trap;
        }

        # the operator's 404 page, in a shielded location
        location /trap-ep/ {
            pow_shield_trap;
            error_page 404 /ep/404.html;
        }

        location /ep/ {
            pow_shield_limit 100 1h;
        }

        location /short/ {
            pow_shield_limit 1 1h;
            pow_shield_strikes 3 2s;
        }

        location /ban/ {
            pow_shield_limit 1 1h;
            pow_shield_strikes 2 1s;
            pow_shield_ban 4s after=2;
        }

        location /many/ {
            pow_shield_limit 20 1h;
            pow_shield_strikes 40 60s;
        }

        location /rise/ {
            pow_shield_limit 2 1h;
            pow_shield_strikes 50 60s;
            pow_shield_difficulty 1 max=3;
        }

        location /close/ {
            pow_shield_limit 1 1h;
            pow_shield_strikes 1 60s;
            pow_shield_block_status 444;
        }

        location /off/ {
            pow_shield_limit 1 1h;
            pow_shield_strikes off;
        }

        location /dry/ {
            pow_shield_limit 1 1h;
            pow_shield_dry_run on;
        }

        location /local/ {
            pow_shield_limit 1 1h;
            pow_shield_fail local;
        }
    }
}
EOF

my $n1 = Test::PowShield->new->require_redis;
$n1->run_redis;
my $n2 = Test::PowShield->new;
$n2->use_redis($n1->redis);

for my $t ($n1, $n2) {
    $t->write_file_expand('nginx.conf', $conf);
    $t->write_file("html/$_/data.json", qq({"dir":"$_"}\n))
        for qw(api other short ban many rise close off dry local);
    $t->write_file('html/ep/404.html', "custom not found\n");
    $t->run;
}

###############################################################################

sub get {
    my ($t, $client, $dir, %h) = @_;
    return $t->http_get("/$dir/data.json", 'X-Client' => $client, %h);
}

sub tag { 'pow:{' . unpack('H*', $_[0]) . '}' }
sub skey { tag($_[0]) . ':s' }
sub wkey { tag($_[0]) . ":w:$_[1]" }

sub redis { $n1->redis_cmd(@_) }

# Scripts the nodes ran so far
sub script_calls {
    my $info = redis('INFO', 'commandstats') // '';
    my %c = $info =~ /^cmdstat_([^:]+):calls=(\d+)/mg;
    return ($c{evalsha} // 0) + ($c{eval} // 0);
}

sub is_block_response {
    my ($r, $shield, $name) = @_;
    subtest $name => sub {
        is($r->status, 403, 'status 403');
        is($r->header('Content-Type'), 'text/plain', 'Content-Type text/plain');
        is($r->header('X-PoW-Shield'), $shield, "X-PoW-Shield: $shield");
        is($r->body, 'Blocked by Circuit Breaker', 'body');
        ok(!$r->has_header($_), "no $_") for qw(X-PoW-Challenge
            X-PoW-Difficulty X-RateLimit-Limit X-RateLimit-Remaining
            X-RateLimit-Reset RateLimit RateLimit-Policy Retry-After);
    };
}

# one script call per request: green, challenged, blocked

{
    get($n1, 'warm', 'api');
    my $c0 = script_calls();
    get($n1, 'calls', 'other') for 1 .. 5;
    is(script_calls() - $c0, 5, 'green path: 5 requests, 5 script calls');
    $c0 = script_calls();
    get($n1, 'calls', 'api') for 1 .. 4;
    is(script_calls() - $c0, 4,
        '1 pass and 3 challenged (strikes included): 4 script calls');
}

# the 6th offence is the first blocked; every node sees the block

{
    is(get($n1, 'six', 'api')->status, 200, 'six: the request within the limit passes');
    my @r = map { get($_ % 2 ? $n1 : $n2, 'six', 'api') } 1 .. 5;
    is(statuses(@r), '429 429 429 429 429', 'five offences on two nodes: 429');
    is(join(' ', map { $_->header('X-Strikes') // 'none' } @r), '1 2 3 4 5',
        '$pow_shield_strikes counts the offences of both nodes');
    is(redis('GET', skey('six')), 5, "Redis's strike key holds 5");

    my $pttl = redis('PTTL', skey('six'));
    my $zcard = redis('ZCARD', wkey('six', '1:3600000'));
    my $over = redis('GET', tag('six') . ':o:1:3600000');
    my $c0 = script_calls();
    my $r = get($n1, 'six', 'api');
    is_block_response($r, 'blocked', 'the 6th offence: the block response');
    is($r->header('X-Result'), 'blocked', '$pow_shield_result blocked');
    $r = get($n2, 'six', 'api');
    is($r->status, 403, 'the second node blocks the client too');
    is($r->header('X-PoW-Shield'), 'blocked', '... X-PoW-Shield: blocked');
    is(script_calls() - $c0, 2, 'each node learns the block from Redis once');

    # a block a node learnt holds there without asking Redis again
    $c0 = script_calls();
    $r = get($n2, 'six', 'other');
    is($r->status, 403, 'blocked under the limit of another location');
    is($r->header('X-Strikes'), 5, '... $pow_shield_strikes 5');
    is(get($n1, 'six', 'api', solution($r[0]))->status, 403,
        'blocked with a correct solution');
    is(statuses(map { get($_ % 2 ? $n1 : $n2, 'six', 'api') } 1 .. 10),
        join(' ', ('403') x 10), 'ten more requests on both nodes: blocked');
    is(script_calls() - $c0, 0, "a blocked client's requests no longer reach Redis");

    is(redis('GET', skey('six')), 5, 'blocked requests add no strikes');
    ok(redis('PTTL', skey('six')) <= $pttl, 'blocked requests do not renew the TTL');
    is(redis('ZCARD', wkey('six', '1:3600000')), $zcard,
        'blocked requests are not counted by the limiter');
    is(redis('GET', tag('six') . ':o:1:3600000'), $over,
        'blocked requests are not counted as refusals');
    is(redis('EXISTS', wkey('six', '100:3600000')), 0,
        'nothing written for the other location');
}

# 60 concurrent offenders against limit 20 with pow_shield_strikes 40:
# no strike lost

{
    my @s = map {
        ($_ % 2 ? $n1 : $n2)->send_request("GET /many/data.json HTTP/1.0\r\n"
            . "Host: localhost\r\nX-Client: many\r\n\r\n")
    } 1 .. 80;
    my %n;
    $n{$_->status // 'none'}++ for map { $n1->read_response($_) } @s;
    is(join(' ', map { "$_:$n{$_}" } sort keys %n), '200:20 403:20 429:40',
        '80 concurrent requests on two nodes: 20 pass, 40 strikes, 20 blocked');
    is(redis('GET', skey('many')), 40, "Redis's strike key holds exactly 40");
    is(get($n2, 'many', 'many')->status, 403, 'the next offence is blocked');
}

# the block ends <time> after the last strike; blocked requests do not
# extend it

{
    is(get($n1, 'end', 'short')->status, 200, 'end: the request within the limit');
    my @r = map { get($n1, 'end', 'short') } 1 .. 4;
    is(statuses(@r), '429 429 429 403', 'pow_shield_strikes 3: the 4th offence blocked');
    my $pttl = redis('PTTL', skey('end'));
    ok($pttl > 0 && $pttl <= 2000, "the strike key expires <time> after the last ($pttl ms)");
    sleep(1);
    @r = map { get($n2, 'end', 'short') } 1 .. 3;
    is(statuses(@r), '403 403 403', '1 s later: still blocked');
    sleep(1.3);
    my $r = get($n1, 'end', 'short');
    is($r->status, 429, '<time> after the last strike: unblocked (429 again)');
    is($r->header('X-Strikes'), 1, '... and the strikes start over');
}

# every strike renews the TTL: strikes 1.2 s apart with a 2 s TTL add up
# (the 3rd comes 2.4 s after the 1st)

{
    is(get($n1, 'spread', 'short')->status, 200, 'spread: the request within the limit');
    my @r;
    for my $i (1 .. 3) {
        push @r, get($i % 2 ? $n1 : $n2, 'spread', 'short');
        sleep(1.2) if $i < 3;
    }
    is(statuses(@r), '429 429 429', 'spread: three offences 1.2 s apart');
    is($r[2]->header('X-Strikes'), 3, 'spread: the 3rd strike counts all three');
    is(get($n1, 'spread', 'short')->status, 403, 'spread: the next is blocked');
}

# strikes from failed verifications; the blocked solution is not spent

{
    # tokens are bound to the address (127.0.0.1), not to the key
    get($n1, 'issuer', 'api');
    my $challenge = get($n1, 'issuer', 'api');
    is($challenge->status, 429, 'failed: a challenge issued');
    my $spent = 'pow:spent:{' . sha256_hex($challenge->header('X-PoW-Challenge') // '') . '}';

    is(get($n1, 'wrong', 'api')->status, 200, 'failed: the request within the limit');
    my @r = map { get($n2, 'wrong', 'api', solution($challenge, wrong => 1)) } 1 .. 5;
    is(statuses(@r), '422 422 422 422 422', 'five wrong solutions: 422');
    is(redis('GET', skey('wrong')), 5, 'each wrong solution is a strike in Redis');

    my $r = get($n1, 'wrong', 'api', solution($challenge));
    is($r->status, 403, 'a correct solution after five wrong ones: blocked');
    is(redis('EXISTS', $spent), 0, 'the blocked solution was not spent');

    is(get($n2, 'spender', 'api')->status, 200, 'another key: within the limit');
    $r = get($n2, 'spender', 'api', solution($challenge));
    is($r->status, 200, 'another key uses the token');
    is($r->header('X-Result'), 'solved', '... $pow_shield_result solved');
    is(redis('EXISTS', $spent), 1, '... and it is spent now');
}

# trap hits: 404 and a strike each; a trap's strikes block everywhere

{
    my @r = map { ($_ % 2 ? $n1 : $n2)->http_get('/trap/x', 'X-Client' => 'trapped') }
        1 .. 6;
    is(statuses(@r), '404 404 404 404 404 403', 'trap: five 404s, the 6th blocked');
    is($r[0]->header('X-Result'), 'trap', '$pow_shield_result trap');
    is_block_response($r[5], 'blocked', 'trap: the block response');
    is(redis('GET', skey('trapped')), 5, 'trap: 5 strikes in Redis');
    is(get($n1, 'trapped', 'api')->status, 403,
        "a trap's strikes block the client on a shielded location");

    my @s = map {
        ($_ % 2 ? $n1 : $n2)->send_request("GET /trap/c HTTP/1.0\r\n"
            . "Host: localhost\r\nX-Client: concurrent\r\n\r\n")
    } 1 .. 5;
    @r = map { $n1->read_response($_) } @s;
    is(statuses(@r), '404 404 404 404 404', '5 concurrent trap hits: 404');
    is(redis('GET', skey('concurrent')), 5, '5 concurrent trap hits: 5 strikes');
    is($n2->http_get('/trap/c', 'X-Client' => 'concurrent')->status, 403,
        'after 5 concurrent trap hits: blocked');
}

# a replayed solution (409) is a strike (sent without waiting for it)

{
    get($n1, 'replay', 'api');
    my $c = get($n1, 'replay', 'api');
    is($c->status, 429, 'replay: a challenge (strike 1)');
    is(get($n2, 'replay', 'api', solution($c))->status, 200, 'replay: solved once');
    is(redis('GET', skey('replay')), 0, 'replay: paying took back the strike');
    my @r = map { get($_ % 2 ? $n1 : $n2, 'replay', 'api', solution($c)) } 1 .. 5;
    is(statuses(@r), '409 409 409 409 409', 'replay: five replays, 409');
    ok(eventually(5, sub { (redis('GET', skey('replay')) // 0) == 5 }),
        'replay: each 409 was a strike in Redis');
    is(get($n1, 'replay', 'api')->status, 403, 'replay: the client is blocked');
}

# a trap's 404 (decided after Redis answered) gets the operator's error_page

{
    my $r = $n1->http_get('/trap-ep/x', 'X-Client' => 'ep-trap');
    is($r->status, 404, 'trap with error_page: 404');
    is($r->body, "custom not found\n", "trap with error_page: the operator's 404 page");
    is(redis('GET', skey('ep-trap')), 1, 'trap with error_page: one strike');
}

# pow_shield_block_status 444 closes the connection without a response

{
    my @r = map { get($n1, 'closed', 'close') } 1 .. 3;
    is(statuses(@r[0, 1]), '200 429', '444: within the limit, then one strike');
    is($r[2]->raw, '', 'pow_shield_block_status 444: closed without a response');
    ok(!$r[2]->error, '... closed, not timed out');
}

# the ban: two breaker openings within its time ban the client; it ends

{
    is(get($n1, 'banned', 'ban')->status, 200, 'ban: the request within the limit');
    my @r = map { get($n1, 'banned', 'ban') } 1 .. 3;
    is(statuses(@r), '429 429 403', 'ban: the first opening blocks');
    is($r[2]->header('X-PoW-Shield'), 'blocked', 'ban: first opening: blocked');
    sleep(1.2);
    @r = map { get($n2, 'banned', 'ban') } 1 .. 3;
    is(statuses(@r), '429 429 403', 'ban: strikes forgotten, the second opening');
    is_block_response($r[2], 'banned', 'the second opening within 4 s: banned');
    is(get($n1, 'banned', 'ban')->header('X-PoW-Shield'), 'banned',
        'the other node bans the client too');
    sleep(4.2);
    my $r = get($n1, 'banned', 'ban');
    is($r->status, 429, 'the ban ended: 429 again');
    ok(!$r->has_header('X-PoW-Shield'), '... no X-PoW-Shield');
}

# rising difficulty: base 1, max 3

{
    get($n1, 'rise', 'rise') for 1 .. 2;
    my @r = map { get($n1, 'rise', 'rise') } 1 .. 12;
    my @d = map { $_->header('X-PoW-Difficulty') // 'none' } @r;
    is($d[0], 1, 'rising: the first challenge asks the base (1)');
    ok(!grep({ $_ eq 'none' || $_ > 3 } @d), "rising: never above max=3 (@d)");
    is($d[-1], 3, 'rising: the abusing client reached max');
    is(get($n2, 'rise-fresh', 'rise')->status, 200, 'rising: another client within its limit');

    my $tok = $r[-1]->header('X-PoW-Challenge');
    my $salt = decode_token($tok)->{payload}{salt};
    my $r = get($n2, 'rise', 'rise', 'X-PoW-Challenge' => $tok,
        'X-PoW-Nonce' => solve($salt, 1, exact => 1));
    is($r->status, 422, 'rising: a difficulty-3 token solved at 1: 422');
    $r = get($n2, 'rise', 'rise', solution($r[0]));
    is($r->status, 200, 'rising: the early difficulty-1 token, solved at 1: 200');
}

# pow_shield_strikes off never blocks and writes no strike

{
    my @r = map { get($n1, 'off', 'off') } 1 .. 10;
    is(statuses(@r), '200' . ' 429' x 9, 'strikes off: 9 offences, never blocked');
    is(redis('EXISTS', skey('off')), 0, 'strikes off: no strike key');
}

# dry run: the block is decided and logged, not enforced

{
    my @r = map { get($n1, 'dry', 'dry') } 1 .. 7;
    is(statuses(@r), '200 200 200 200 200 200 200', 'dry run: never blocked');
    is($r[6]->header('X-Result'), 'blocked', 'dry run: the 6th offence: blocked');
    ok(scalar $n1->error_log_lines(
        qr/dry run, not enforced: circuit breaker open, blocked/),
        'dry run: logged "dry run, not enforced: circuit breaker open, blocked"');
}

# Redis gone, pow_shield_fail local: the zone strikes and blocks

{
    $n1->kill_redis;
    my @r = map { get($n1, 'fallback', 'local') } 1 .. 7;
    is(statuses(@r), '200 429 429 429 429 429 403',
        'Redis down, fail local: the zone counts strikes and blocks the 6th offence');
    is($r[5]->header('X-Strikes'), 5, 'fail local: 5 strikes in the zone');
    is($r[6]->header('X-PoW-Shield'), 'blocked', 'fail local: X-PoW-Shield: blocked');
    ok(scalar $n1->error_log_lines(qr/pow_shield: redis \S+ unavailable/),
        'fail local: (premise) Redis was unavailable');

    is(get($n1, 'six', 'api')->status, 403,
        'Redis down: a block the node learnt from Redis still holds');

    @r = map { $n1->http_get('/trap/x', 'X-Client' => 'fallback-trap') } 1 .. 6;
    is(statuses(@r), '404 404 404 404 404 403',
        'Redis down: trap strikes fall back to the zone, the 6th hit blocked');
}

###############################################################################

$n1->done_testing;
