#!/usr/bin/perl

# The circuit breaker (red zone, docs/directives.md, pow_shield_strikes) in local mode: strikes from
# refusals, failed verifications and traps; the block and its response; its
# end; the ban; rising difficulty; strikes off; dry run; the variables.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Test::PowShield qw(:pow :util);
use Time::HiRes qw(sleep);

###############################################################################

my $t = Test::PowShield->new;

$t->write_file_expand('nginx.conf', <<'EOF');
%%TEST_GLOBALS%%

worker_processes 2;

events {
}

http {
    %%TEST_GLOBALS_HTTP%%

    default_type application/json;

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
            error_page 404 /ep/404.html;
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
    }
}
EOF

$t->write_file("html/$_/data.json", qq({"dir":"$_"}\n))
    for qw(api other short ban many rise close off dry);

$t->write_file('html/ep/404.html', "custom not found\n");

$t->run;

###############################################################################

sub get {
    my ($client, $dir, %h) = @_;
    return $t->http_get("/$dir/data.json", 'X-Client' => $client, %h);
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

# the 6th offence is the first blocked; the 5 before it are 429

{
    is(get('six', 'api')->status, 200, 'six: the request within the limit passes');
    my @r = map { get('six', 'api') } 1 .. 7;
    is(statuses(@r), '429 429 429 429 429 403 403',
        'pow_shield_strikes 5: five offences get 429, the 6th is blocked');
    is(join(' ', map { $_->header('X-Strikes') // 'none' } @r[0 .. 4]),
        '1 2 3 4 5', '$pow_shield_strikes counts the offences');
    is(join(' ', map { $_->header('X-Result') // 'none' } @r[4, 5]),
        'challenge blocked', '$pow_shield_result: challenge, then blocked');
    is($r[5]->header('X-Strikes'), 5, 'blocked: $pow_shield_strikes stays 5');
    is_block_response($r[5], 'blocked', 'the block response');

    # blocked everywhere: under another location's limit, and with a
    # correct solution
    my $r = get('six', 'other');
    is($r->status, 403, 'blocked client, shielded location under its limit: 403');
    is($r->header('X-PoW-Shield'), 'blocked', '... X-PoW-Shield: blocked');
    is(get('six', 'api', solution($r[0]))->status, 403,
        'blocked client with a correct solution: 403');
    is(get('six-other', 'api')->status, 200, 'another client is not blocked');
}

# blocked requests add no strikes and do not extend the block; the block
# ends <time> after the last strike

{
    is(get('end', 'short')->status, 200, 'end: the request within the limit');
    my @r = map { get('end', 'short') } 1 .. 4;
    is(statuses(@r), '429 429 429 403', 'pow_shield_strikes 3: the 4th offence blocked');
    sleep(1);
    @r = map { get('end', 'short') } 1 .. 3;
    is(statuses(@r), '403 403 403', '1 s later: still blocked');
    is($r[2]->header('X-Strikes'), 3, 'blocked requests add no strikes');
    sleep(1.3);
    # 2.3 s after the last strike, 1.3 s after the last blocked request
    my $r = get('end', 'short');
    is($r->status, 429, '<time> after the last strike: unblocked (429 again)');
    is($r->header('X-Strikes'), 1, '... and the strikes start over');
}

# every strike renews the TTL: strikes 1.2 s apart with a 2 s TTL add up
# (the 3rd comes 2.4 s after the 1st)

{
    is(get('spread', 'short')->status, 200, 'spread: the request within the limit');
    my @r;
    for my $i (1 .. 3) {
        push @r, get('spread', 'short');
        sleep(1.2) if $i < 3;
    }
    is(statuses(@r), '429 429 429', 'spread: three offences 1.2 s apart');
    is($r[2]->header('X-Strikes'), 3, 'spread: the 3rd strike counts all three');
    is(get('spread', 'short')->status, 403, 'spread: the next is blocked');
}

# strikes from failed verifications; the blocked solution is not spent

{
    # a token for 127.0.0.1 issued to another key (tokens are bound to the
    # address, not to the key)
    get('issuer', 'api');
    my $challenge = get('issuer', 'api');
    is($challenge->status, 429, 'failed: a challenge issued');

    is(get('wrong', 'api')->status, 200, 'failed: the request within the limit');
    my @r = map { get('wrong', 'api', solution($challenge, wrong => 1)) } 1 .. 5;
    is(statuses(@r), '422 422 422 422 422', 'five wrong solutions: 422');
    is($r[4]->header('X-Strikes'), 5, 'each wrong solution is a strike');
    is($r[4]->header('X-Result'), 'invalid', '$pow_shield_result invalid');

    my $r = get('wrong', 'api', solution($challenge));
    is($r->status, 403, 'a correct solution after five wrong ones: blocked');
    is($r->header('X-PoW-Shield'), 'blocked', '... X-PoW-Shield: blocked');

    is(get('spender', 'api')->status, 200, 'another key: within the limit');
    $r = get('spender', 'api', solution($challenge));
    is($r->status, 200, 'the blocked solution was not spent: another key uses it');
    is($r->header('X-Result'), 'solved', '... $pow_shield_result solved');
}

# trap hits: 404 and a strike each; works without pow_shield_limit

{
    my @r = map { $t->http_get('/trap/x', 'X-Client' => 'trapped') } 1 .. 6;
    is(statuses(@r), '404 404 404 404 404 403', 'trap: five 404s, the 6th blocked');
    is(join(' ', map { $_->header('X-Strikes') // 'none' } @r[0 .. 4]),
        '1 2 3 4 5', 'trap: each hit is a strike');
    is($r[0]->header('X-Result'), 'trap', '$pow_shield_result trap');
    is_block_response($r[5], 'blocked', 'trap: the block response');
    is(get('trapped', 'api')->status, 403,
        "a trap's strikes block the client on a shielded location");
}

# a trap's 404 looks like any missing page: the operator's error_page
# serves it, even in a shielded location

{
    my $missing = get('ep-missing', 'ep');
    is($missing->status, 404, '(premise) a missing page: 404');
    is($missing->body, "custom not found\n", '(premise) ... the error_page');
    my $r = $t->http_get('/trap-ep/x', 'X-Client' => 'ep-trap');
    is($r->status, 404, 'trap with error_page: 404');
    is($r->body, "custom not found\n", "trap with error_page: the operator's 404 page");
}

# concurrent trap hits all count

{
    my @s = map { $t->send_request("GET /trap/c HTTP/1.0\r\nHost: localhost\r\n"
        . "X-Client: concurrent\r\n\r\n") } 1 .. 5;
    my @r = map { $t->read_response($_) } @s;
    is(statuses(@r), '404 404 404 404 404', '5 concurrent trap hits: 404');
    is(join(' ', sort map { $_->header('X-Strikes') // 'none' } @r), '1 2 3 4 5',
        '5 concurrent trap hits: strikes 1 to 5, none lost');
    is($t->http_get('/trap/c', 'X-Client' => 'concurrent')->status, 403,
        'after 5 concurrent trap hits: blocked');
}

# a replayed solution (409) is a strike

{
    get('replay', 'api');
    my $c = get('replay', 'api');
    is($c->status, 429, 'replay: a challenge (strike 1)');
    my $r = get('replay', 'api', solution($c));
    is($r->status, 200, 'replay: solved once');
    is($r->header('X-Strikes'), 0, 'replay: paying took back the strike');
    my @r = map { get('replay', 'api', solution($c)) } 1 .. 5;
    is(statuses(@r), '409 409 409 409 409', 'replay: five replays, 409');
    is(get('replay', 'api')->status, 403, 'replay: each 409 was a strike (blocked)');
}

# 60 concurrent offenders against limit 20 with pow_shield_strikes 40:
# no strike lost

{
    my @s = map { $t->send_request("GET /many/data.json HTTP/1.0\r\n"
        . "Host: localhost\r\nX-Client: many\r\n\r\n") } 1 .. 80;
    my %n;
    $n{$_->status // 'none'}++ for map { $t->read_response($_) } @s;
    is(join(' ', map { "$_:$n{$_}" } sort keys %n), '200:20 403:20 429:40',
        '80 concurrent requests: 20 pass, 40 strikes, 20 blocked');
    my $r = get('many', 'many');
    is($r->status, 403, 'the next offence is blocked');
    is($r->header('X-Strikes'), 40, 'exactly 40 strikes recorded');
}

# pow_shield_block_status 444 closes the connection without a response

{
    my @r = map { get('closed', 'close') } 1 .. 3;
    is(statuses(@r[0, 1]), '200 429', '444: within the limit, then one strike');
    is($r[2]->raw, '', 'pow_shield_block_status 444: closed without a response');
    ok(!$r[2]->error, '... closed, not timed out');
}

# the ban: two breaker openings within its time ban the client; it ends

{
    is(get('banned', 'ban')->status, 200, 'ban: the request within the limit');
    my @r = map { get('banned', 'ban') } 1 .. 3;
    is(statuses(@r), '429 429 403', 'ban: the first opening blocks');
    is($r[2]->header('X-PoW-Shield'), 'blocked', 'ban: first opening: blocked');
    sleep(1.2);
    @r = map { get('banned', 'ban') } 1 .. 3;
    is(statuses(@r), '429 429 403', 'ban: strikes forgotten, the second opening');
    is_block_response($r[2], 'banned', 'the second opening within 4 s: banned');
    is($r[2]->header('X-Result'), 'banned', '$pow_shield_result banned');
    sleep(1.2);
    is(get('banned', 'ban')->header('X-PoW-Shield'), 'banned',
        'banned after the strikes expired');
    sleep(3.2);
    my $r = get('banned', 'ban');
    is($r->status, 429, 'the ban ended: 429 again');
    ok(!$r->has_header('X-PoW-Shield'), '... no X-PoW-Shield');
}

# rising difficulty: base 1, max 3

{
    get('rise', 'rise') for 1 .. 2;
    my @r = map { get('rise', 'rise') } 1 .. 12;
    my @d = map { $_->header('X-PoW-Difficulty') // 'none' } @r;
    is($d[0], 1, 'rising: the first challenge asks the base (1)');
    ok($d[-1] > 1, "rising: an abusing client is asked more ($d[-1])");
    ok(!grep({ $_ eq 'none' || $_ > 3 } @d), "rising: never above max=3 (@d)");
    is($d[-1], 3, 'rising: the abusing client reached max');
    is((decode_token($r[-1]->header('X-PoW-Challenge')) || {})->{payload}{difficulty},
        3, 'rising: the token carries the raised difficulty');
    is(get('rise-fresh', 'rise')->status, 200, 'rising: another client within its limit');

    # a token is verified against the difficulty it was issued with
    my $tok = $r[-1]->header('X-PoW-Challenge');
    my $salt = decode_token($tok)->{payload}{salt};
    my $r = get('rise', 'rise', 'X-PoW-Challenge' => $tok,
        'X-PoW-Nonce' => solve($salt, 1, exact => 1));
    is($r->status, 422, 'rising: a difficulty-3 token solved at 1: 422');
    $r = get('rise', 'rise', solution($r[0]));
    is($r->status, 200, 'rising: the early difficulty-1 token, solved at 1: 200');
    is($r->header('X-Result'), 'solved', '... solved');
}

# pow_shield_strikes off never blocks

{
    my @r = map { get('off', 'off') } 1 .. 12;
    is(statuses(@r), '200' . ' 429' x 11, 'strikes off: 11 offences, never blocked');
    is(get('off', 'off', solution($r[1]))->status, 200,
        'strikes off: a correct solution still passes');
}

# dry run: the block is decided and logged, not enforced

{
    my @r = map { get('dry', 'dry') } 1 .. 7;
    is(statuses(@r), '200 200 200 200 200 200 200', 'dry run: never blocked');
    is($r[5]->header('X-Result'), 'challenge', 'dry run: the 5th offence: challenge');
    is($r[6]->header('X-Result'), 'blocked', 'dry run: the 6th offence: blocked');
    ok(scalar $t->error_log_lines(
        qr/dry run, not enforced: circuit breaker open, blocked/),
        'dry run: logged "dry run, not enforced: circuit breaker open, blocked"');
}

# the variables under the limit

{
    my $r = get('vars', 'api');
    is($r->header('X-Result'), 'pass', '$pow_shield_result pass');
    is($r->header('X-Strikes'), 0, '$pow_shield_strikes 0 for a clean client');
}

###############################################################################

$t->done_testing;
