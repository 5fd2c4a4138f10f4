#!/usr/bin/perl

# The circuit breaker (the red zone, docs/directives.md, pow_shield_strikes):
# strikes from refusals, failed verifications, replays and traps; the block
# and its response; its end; the ban; rising difficulty; strikes off; dry
# run; the variables.  Every scenario runs in local mode (strikes in the
# zone) and in cluster mode (two nodes on one Redis, a series of requests
# going to each node in turn), with what only cluster mode has checked
# there: strikes live in Redis, written by the limiter's own script call
# (or the strike script for traps), so no strike is lost under concurrency
# and every node sees a block; a node keeps a block it learnt in its zone
# and answers it without Redis; with Redis gone, pow_shield_fail local
# strikes in the zone.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Test::PowShield qw(:pow :util :redis);
use Test::PowShield::Modes;
use Time::HiRes qw(sleep);

###############################################################################

my $conf = http_conf(<<'EOF', workers => 2);
    pow_shield_secret "breaker-suite-secret-0123456789abcdefgh";
    %%REDIS%%

    server {
        %%TEST_SERVER%%

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

        # cluster mode with Redis gone (the default policy, said here)
        location /local/ {
            pow_shield_limit 1 1h;
            pow_shield_fail local;
        }
    }
EOF

my %files = map { ("html/$_/data.json" => qq({"dir":"$_"}\n)) }
    qw(api other short ban many rise close off dry local);
$files{'html/ep/404.html'} = "custom not found\n";

###############################################################################

sub get {
    my ($t, $client, $dir, %h) = @_;
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
            X-RateLimit-Reset RateLimit RateLimit-Policy);
        like($r->header('Retry-After') // '', qr/^[1-9][0-9]*$/,
            'Retry-After: the seconds until the block ends');
    };
}

Test::PowShield::Modes->each_mode($conf, nodes => 2,
    redis => 'timeout=3s', files => \%files, sub {
    my ($m) = @_;
    my ($t, $other) = ($m->node(1), $m->node(2));
    my $redis = $m->redis;
    my $cluster = $m->cluster;

    # the script calls the nodes made so far
    my $script_calls = sub { $redis->calls(qw(evalsha eval)) };

    # cluster mode: one script call per request: green, challenged, blocked

    if ($cluster) {
        get($t, 'warm', 'api');
        my $c0 = $script_calls->();
        get($t, 'calls', 'other') for 1 .. 5;
        is($script_calls->() - $c0, 5, "$m: green path: 5 requests, 5 script calls");
        $c0 = $script_calls->();
        # (Redis's window script: the 1st request, new to the limit, is
        # admitted (one ZADD, no ZCARD: it has no log); the 2nd finds the
        # log, counts it (one ZCARD) and is refused; a batch does neither)
        my ($zadd0, $zcard0) = ($redis->calls('zadd'), $redis->calls('zcard'));
        get($t, 'calls', 'api') for 1 .. 4;
        # the node refuses the 3rd and 4th itself and sends their strikes
        # in a batch
        is($redis->calls('zadd') - $zadd0, 1, "$m: 1 pass and 3 challenged: 1 admission in Redis");
        is($redis->calls('zcard') - $zcard0, 1,
            "$m: ... and 1 count of the log: 2 window-script calls (strikes included)");
        ok(eventually(5, sub { ($redis->cmd('GET', client_key('calls', 's')) // 0) == 3 }),
            "$m: ... and the 2 strikes decided by the node reach Redis");
        my $calls = $script_calls->() - $c0;
        ok($calls >= 3 && $calls <= 4, "$m: ... in one or two batches ($calls script calls)");
    }

    # the 6th offence is the first blocked; every node sees the block

    {
        is(get($t, 'six', 'api')->status, 200,
            "$m: six: the request within the limit passes");
        # (in cluster mode the first node refuses the client itself after
        # Redis's first refusal; how other nodes' strikes add up:
        # pow_shield_cluster_local_refusals.t)
        my @r = map { get($t, 'six', 'api') } 1 .. 5;
        my ($pttl, $zcard, $over, $c0);
        if ($cluster) {
            ok(eventually(5, sub { ($redis->cmd('GET', client_key('six', 's')) // 0) == 5 }),
                "$m: Redis's strike key holds 5");
            $pttl = $redis->cmd('PTTL', client_key('six', 's'));
            $zcard = $redis->cmd('ZCARD', client_key('six', 'w', 1, 3600000));
            $over = $redis->cmd('GET', client_key('six', 'o', 1, 3600000));
            $c0 = $script_calls->();
        }
        my $blocked = get($t, 'six', 'api');
        my $second = get($other, 'six', 'api');
        is(statuses(@r, $blocked, $second), '429 429 429 429 429 403 403',
            "$m: pow_shield_strikes 5: five offences get 429,"
            . ' the 6th is blocked, and so is the next at the other node');
        is(join(' ', map { $_->header('X-Strikes') // 'none' } @r), '1 2 3 4 5',
            "$m: \$pow_shield_strikes counts the offences");
        is(join(' ', map { $_->header('X-Result') // 'none' } $r[4], $blocked),
            'challenge blocked', "$m: \$pow_shield_result: challenge, then blocked");
        is($blocked->header('X-Strikes'), 5, "$m: blocked: \$pow_shield_strikes stays 5");
        is_block_response($blocked, 'blocked', "$m: the 6th offence: the block response");
        is($second->header('X-PoW-Shield'), 'blocked',
            "$m: the other node blocks the client too: X-PoW-Shield: blocked");
        is($script_calls->() - $c0, 1,
            "$m: the node whose breaker opened blocks at once, the other learns it from Redis once")
            if $cluster;

        # blocked everywhere: under another location's limit, and with a
        # correct solution; a block a node learnt holds there without
        # asking Redis again
        $c0 = $script_calls->() if $cluster;
        my $r = get($other, 'six', 'other');
        is($r->status, 403, "$m: blocked client, shielded location under its limit: 403");
        is($r->header('X-PoW-Shield'), 'blocked', "$m: ... X-PoW-Shield: blocked");
        is($r->header('X-Strikes'), 5, "$m: ... \$pow_shield_strikes 5");
        is(get($t, 'six', 'api', solution($r[0]))->status, 403,
            "$m: blocked client with a correct solution: 403");
        is(statuses(map { get($m->node($_), 'six', 'api') } 1 .. 10),
            join(' ', ('403') x 10), "$m: ten more requests on every node: blocked");

        if ($cluster) {
            is($script_calls->() - $c0, 0,
                "$m: a blocked client's requests no longer reach Redis");
            is($redis->cmd('GET', client_key('six', 's')), 5,
                "$m: blocked requests add no strikes");
            ok($redis->cmd('PTTL', client_key('six', 's')) <= $pttl,
                "$m: blocked requests do not renew the TTL");
            is($redis->cmd('ZCARD', client_key('six', 'w', 1, 3600000)), $zcard,
                "$m: blocked requests are not counted by the limiter");
            is($redis->cmd('GET', client_key('six', 'o', 1, 3600000)), $over,
                "$m: blocked requests are not counted as refusals");
            is($redis->cmd('EXISTS', client_key('six', 'w', 100, 3600000)), 0,
                "$m: nothing written for the other location");
        }
        is(get($other, 'six-other', 'api')->status, 200,
            "$m: another client is not blocked");
    }

    # 80 concurrent requests against limit 20 with pow_shield_strikes 40:
    # no strike lost

    {
        my @s = map {
            $m->node($_)->send_request("GET /many/data.json HTTP/1.0\r\n"
                . "Host: localhost\r\nX-Client: many\r\n\r\n")
        } 1 .. 80;
        my %n;
        $n{$_->status // 'none'}++ for map { $t->read_response($_) } @s;
        if (!$cluster) {
            is(join(' ', map { "$_:$n{$_}" } sort keys %n), '200:20 403:20 429:40',
                "$m: 80 concurrent requests: 20 pass, 40 strikes, 20 blocked");
        } else {
            # each node refuses on what it knows: the 429s of one node
            # reach the others within a batch, so a few more than 40 may
            # be sent before every node blocks; each is a strike in Redis
            is($n{200}, 20, "$m: 80 concurrent requests on every node: exactly 20 pass");
            is(($n{429} // 0) + ($n{403} // 0), 60, "$m: ... the other 60 refused or blocked");
            ok(($n{429} // 0) >= 40, "$m: ... at least 40 strikes before the block ($n{429})");
            ok(eventually(5, sub { ($redis->cmd('GET', client_key('many', 's')) // 0) == $n{429} }),
                "$m: Redis's strike key holds exactly one per 429 sent");
        }
        my $r;
        ok(eventually(5, sub { $r = get($other, 'many', 'many'); $r->status == 403 }),
            "$m: the next offence is blocked");
        if ($cluster) {
            # (a node keeps a block it learnt as the threshold's strikes)
            ok(($r->header('X-Strikes') // 0) >= 40, "$m: at least 40 strikes recorded");
        } else {
            is($r->header('X-Strikes'), 40, "$m: exactly 40 strikes recorded");
        }
    }

    # blocked requests add no strikes and do not extend the block; the
    # block ends <time> after the last strike

    {
        is(get($t, 'end', 'short')->status, 200, "$m: end: the request within the limit");
        my @r = map { get($t, 'end', 'short') } 1 .. 4;
        is(statuses(@r), '429 429 429 403',
            "$m: pow_shield_strikes 3: the 4th offence blocked");
        if ($cluster) {
            my $pttl = $redis->cmd('PTTL', client_key('end', 's'));
            ok($pttl > 0 && $pttl <= 2000,
                "$m: the strike key expires <time> after the last ($pttl ms)");
        }
        sleep(1);
        @r = map { get($other, 'end', 'short') } 1 .. 3;
        is(statuses(@r), '403 403 403', "$m: 1 s later: still blocked (at the other node)");
        is($r[2]->header('X-Strikes'), 3, "$m: blocked requests add no strikes");
        sleep(1.3);
        # 2.3 s after the last strike, 1.3 s after the last blocked request
        my $r = get($t, 'end', 'short');
        is($r->status, 429, "$m: <time> after the last strike: unblocked (429 again)");
        is($r->header('X-Strikes'), 1, "$m: ... and the strikes start over");
    }

    # every strike renews the TTL: strikes 1.2 s apart with a 2 s TTL add
    # up (the 3rd comes 2.4 s after the 1st)

    {
        is(get($t, 'spread', 'short')->status, 200,
            "$m: spread: the request within the limit");
        my @r;
        for my $i (1 .. 3) {
            push @r, get($m->node($i), 'spread', 'short');
            sleep(1.2) if $i < 3;
        }
        is(statuses(@r), '429 429 429', "$m: spread: three offences 1.2 s apart");
        is($r[2]->header('X-Strikes'), 3, "$m: spread: the 3rd strike counts all three");
        is(get($t, 'spread', 'short')->status, 403, "$m: spread: the next is blocked");
    }

    # strikes from failed verifications; the blocked solution is not spent

    {
        # the client's own challenge (tokens are bound to the client key):
        # its 429 is the first strike
        is(get($t, 'wrong', 'api')->status, 200, "$m: failed: the request within the limit");
        my $challenge = get($t, 'wrong', 'api');
        is($challenge->status, 429, "$m: failed: a challenge issued");
        my $spent = spent_key($challenge->header('X-PoW-Challenge'));

        my @r = map { get($other, 'wrong', 'api', solution($challenge, wrong => 1)) } 1 .. 4;
        is(statuses(@r), '422 422 422 422', "$m: four wrong solutions: 422");
        is($r[3]->header('X-Strikes'), 5, "$m: each wrong solution is a strike");
        is($redis->cmd('GET', client_key('wrong', 's')), 5,
            "$m: each wrong solution is a strike in Redis") if $cluster;
        is($r[3]->header('X-Result'), 'invalid', "$m: \$pow_shield_result invalid");

        my $r = get($t, 'wrong', 'api', solution($challenge));
        is($r->status, 403, "$m: a correct solution after five wrong ones: blocked");
        is($r->header('X-PoW-Shield'), 'blocked', "$m: ... X-PoW-Shield: blocked");
        is($redis->cmd('EXISTS', $spent), 0, "$m: the blocked solution was not spent")
            if $cluster;

        # another key of the same address: the token is not its own
        is(get($other, 'spender', 'api')->status, 200, "$m: another key: within the limit");
        $r = get($other, 'spender', 'api', solution($challenge));
        is($r->status, 403, "$m: another key of the address: 403");
        like($r->body, qr/Challenge was not issued for this client/,
            "$m: ... Challenge was not issued for this client");
        ok($r->header('X-PoW-Challenge'), "$m: ... with a fresh challenge");
        is($redis->cmd('EXISTS', $spent), 0, "$m: ... and it is not spent") if $cluster;
    }

    # trap hits: 404 and a strike each; works without pow_shield_limit; a
    # trap's strikes block everywhere

    {
        my @r = map { $m->node($_)->http_get('/trap/x', 'X-Client' => 'trapped') } 1 .. 6;
        is(statuses(@r), '404 404 404 404 404 403', "$m: trap: five 404s, the 6th blocked");
        is(join(' ', map { $_->header('X-Strikes') // 'none' } @r[0 .. 4]),
            '1 2 3 4 5', "$m: trap: each hit is a strike");
        is($r[0]->header('X-Result'), 'trap', "$m: \$pow_shield_result trap");
        is_block_response($r[5], 'blocked', "$m: trap: the block response");
        is($redis->cmd('GET', client_key('trapped', 's')), 5,
            "$m: trap: 5 strikes in Redis") if $cluster;
        is(get($t, 'trapped', 'api')->status, 403,
            "$m: a trap's strikes block the client on a shielded location");
    }

    # a trap's 404 looks like any missing page: the operator's error_page
    # serves it, even in a shielded location (in cluster mode, decided after
    # Redis answered)

    {
        my $missing = get($t, 'ep-missing', 'ep');
        is($missing->status, 404, "$m: (premise) a missing page: 404");
        is($missing->body, "custom not found\n", "$m: (premise) ... the error_page");
        my $r = $t->http_get('/trap-ep/x', 'X-Client' => 'ep-trap');
        is($r->status, 404, "$m: trap with error_page: 404");
        is($r->body, "custom not found\n",
            "$m: trap with error_page: the operator's 404 page");
        is($redis->cmd('GET', client_key('ep-trap', 's')), 1,
            "$m: trap with error_page: one strike") if $cluster;
    }

    # concurrent trap hits all count

    {
        my @s = map { $m->node($_)->send_request("GET /trap/c HTTP/1.0\r\n"
            . "Host: localhost\r\nX-Client: concurrent\r\n\r\n") } 1 .. 5;
        my @r = map { $t->read_response($_) } @s;
        is(statuses(@r), '404 404 404 404 404', "$m: 5 concurrent trap hits: 404");
        is(join(' ', sort map { $_->header('X-Strikes') // 'none' } @r), '1 2 3 4 5',
            "$m: 5 concurrent trap hits: strikes 1 to 5, none lost");
        is($redis->cmd('GET', client_key('concurrent', 's')), 5,
            "$m: 5 concurrent trap hits: 5 strikes") if $cluster;
        is($other->http_get('/trap/c', 'X-Client' => 'concurrent')->status, 403,
            "$m: after 5 concurrent trap hits: blocked");
    }

    # a replayed solution (409) is a strike (in cluster mode written
    # without waiting for it)

    {
        get($t, 'replay', 'api');
        my $c = get($t, 'replay', 'api');
        is($c->status, 429, "$m: replay: a challenge (strike 1)");
        my $r = get($other, 'replay', 'api', solution($c));
        is($r->status, 200, "$m: replay: solved once");
        is($r->header('X-Strikes'), 0, "$m: replay: paying took back the strike");
        is($redis->cmd('GET', client_key('replay', 's')), 0,
            "$m: replay: paying took back the strike in Redis") if $cluster;
        my @r = map { get($m->node($_), 'replay', 'api', solution($c)) } 1 .. 5;
        is(statuses(@r), '409 409 409 409 409', "$m: replay: five replays, 409");
        ok(eventually(5, sub { ($redis->cmd('GET', client_key('replay', 's')) // 0) == 5 }),
            "$m: replay: each 409 was a strike in Redis") if $cluster;
        is(get($t, 'replay', 'api')->status, 403,
            "$m: replay: each 409 was a strike (blocked)");
    }

    # pow_shield_block_status 444 closes the connection without a response

    {
        my @r = map { get($t, 'closed', 'close') } 1 .. 3;
        is(statuses(@r[0, 1]), '200 429', "$m: 444: within the limit, then one strike");
        is($r[2]->raw, '', "$m: pow_shield_block_status 444: closed without a response");
        ok(!$r[2]->error, "$m: ... closed, not timed out");
    }

    # the ban: two breaker openings within its time ban the client
    # everywhere; it outlives the strikes; it ends

    {
        is(get($t, 'banned', 'ban')->status, 200, "$m: ban: the request within the limit");
        my @r = map { get($t, 'banned', 'ban') } 1 .. 3;
        is(statuses(@r), '429 429 403', "$m: ban: the first opening blocks");
        is($r[2]->header('X-PoW-Shield'), 'blocked', "$m: ban: first opening: blocked");
        sleep(1.2);
        @r = map { get($other, 'banned', 'ban') } 1 .. 3;
        is(statuses(@r), '429 429 403', "$m: ban: strikes forgotten, the second opening");
        is_block_response($r[2], 'banned', "$m: the second opening within 4 s: banned");
        is($r[2]->header('X-Result'), 'banned', "$m: \$pow_shield_result banned");
        is(get($t, 'banned', 'ban')->header('X-PoW-Shield'), 'banned',
            "$m: the other node bans the client too");
        sleep(1.2);
        is(get($t, 'banned', 'ban')->header('X-PoW-Shield'), 'banned',
            "$m: banned after the strikes expired");
        sleep(3.2);
        my $r = get($t, 'banned', 'ban');
        is($r->status, 429, "$m: the ban ended: 429 again");
        ok(!$r->has_header('X-PoW-Shield'), "$m: ... no X-PoW-Shield");
    }

    # rising difficulty: base 1, max 3

    {
        get($t, 'rise', 'rise') for 1 .. 2;
        my @r = map { get($t, 'rise', 'rise') } 1 .. 12;
        my @d = map { $_->header('X-PoW-Difficulty') // 'none' } @r;
        is($d[0], 1, "$m: rising: the first challenge asks the base (1)");
        ok($d[-1] > 1, "$m: rising: an abusing client is asked more ($d[-1])");
        ok(!grep({ $_ eq 'none' || $_ > 3 } @d), "$m: rising: never above max=3 (@d)");
        is($d[-1], 3, "$m: rising: the abusing client reached max");
        is((decode_token($r[-1]->header('X-PoW-Challenge')) || {})->{payload}{difficulty},
            3, "$m: rising: the token carries the raised difficulty");
        is(get($other, 'rise-fresh', 'rise')->status, 200,
            "$m: rising: another client within its limit");

        # a token is verified against the difficulty it was issued with
        my $tok = $r[-1]->header('X-PoW-Challenge');
        my $salt = decode_token($tok)->{payload}{salt};
        my $r = get($other, 'rise', 'rise', 'X-PoW-Challenge' => $tok,
            'X-PoW-Nonce' => solve($salt, 1, exact => 1));
        is($r->status, 422, "$m: rising: a difficulty-3 token solved at 1: 422");
        $r = get($other, 'rise', 'rise', solution($r[0]));
        is($r->status, 200, "$m: rising: the early difficulty-1 token, solved at 1: 200");
        is($r->header('X-Result'), 'solved', "$m: ... solved");
    }

    # pow_shield_strikes off never blocks and writes no strike

    {
        my @r = map { get($t, 'off', 'off') } 1 .. 12;
        is(statuses(@r), '200' . ' 429' x 11, "$m: strikes off: 11 offences, never blocked");
        is(get($t, 'off', 'off', solution($r[1]))->status, 200,
            "$m: strikes off: a correct solution still passes");
        is($redis->cmd('EXISTS', client_key('off', 's')), 0,
            "$m: strikes off: no strike key") if $cluster;
    }

    # dry run: the block is decided and logged, not enforced

    {
        my @r = map { get($t, 'dry', 'dry') } 1 .. 6;
        # (cluster mode: the strikes a worker refused itself reach Redis
        # within a batch, 100 ms; the one reaching the threshold is Redis's)
        ok(!$cluster || eventually(5,
                sub { ($redis->cmd('GET', client_key("\0dry\0dry", 's')) // 0) == 5 }),
            "$m: dry run: 5 strikes counted");
        push @r, get($t, 'dry', 'dry');
        is(statuses(@r), '200 200 200 200 200 200 200', "$m: dry run: never blocked");
        is($r[5]->header('X-Result'), 'challenge', "$m: dry run: the 5th offence: challenge");
        is($r[6]->header('X-Result'), 'blocked', "$m: dry run: the 6th offence: blocked");
        ok(scalar $t->error_log_lines(
            qr/dry run, not enforced: circuit breaker open, blocked/),
            "$m: dry run: logged \"dry run, not enforced: circuit breaker open, blocked\"");
    }

    # the variables under the limit

    {
        my $r = get($t, 'vars', 'api');
        is($r->header('X-Result'), 'pass', "$m: \$pow_shield_result pass");
        is($r->header('X-Strikes'), 0, "$m: \$pow_shield_strikes 0 for a clean client");
    }

    # cluster mode, Redis gone, pow_shield_fail local: the zone limits; an
    # unpaid 429 is no strike there (Redis, once back, would not confirm
    # it), a trap hit is

    if ($cluster) {
        $t->kill_redis;
        my @r = map { get($t, 'fallback', 'local') } 1 .. 7;
        is(statuses(@r), '200 429 429 429 429 429 429',
            "$m: Redis down, fail local: the zone limits, an unpaid 429 is no strike");
        is($r[6]->header('X-Strikes'), 0, "$m: fail local: no strike in the zone");
        ok($r[6]->has_header('X-PoW-Challenge'), "$m: fail local: each a challenge");
        ok($t->redis_unavailable_count,
            "$m: fail local: (premise) Redis was unavailable");

        is(get($t, 'six', 'api')->status, 403,
            "$m: Redis down: a block the node learnt from Redis still holds");

        @r = map { $t->http_get('/trap/x', 'X-Client' => 'fallback-trap') } 1 .. 6;
        is(statuses(@r), '404 404 404 404 404 403',
            "$m: Redis down: trap strikes fall back to the zone, the 6th hit blocked");
    }
});

###############################################################################

Test::PowShield::Modes->done_testing;
