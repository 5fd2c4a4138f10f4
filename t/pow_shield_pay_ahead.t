#!/usr/bin/perl

# Paying ahead (SPEC 4, docs/protocol.md 6, docs/directives.md
# pow_shield_pay_ahead): a response after which the client has no free
# request left, and every response to a paid request, carries the next
# challenge (X-PoW-Next-Challenge, -Bits, -Difficulty) at the price the next
# request will be asked; its solution admits the next request over the limit
# at once (one round trip, no 429), is spent once, and passes unspent under
# the limit.  Local mode and cluster mode (two nodes on one Redis).

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
    pow_shield_secret "pay-ahead-suite-secret-0123456789abcdef";
    %%REDIS%%

    server {
        %%TEST_SERVER%%

        add_header X-Result $pow_shield_result always;
        add_header X-Strikes $pow_shield_strikes always;

        pow_shield_key $http_x_client;
        set_real_ip_from 127.0.0.1;
        real_ip_header X-Real-IP;

        location /ahead/ {
            pow_shield_limit 2 1h;
            pow_shield_difficulty 10b;
        }

        location /rise/ {
            pow_shield_limit 2 1h;
            pow_shield_difficulty 6b max=12b;
        }

        location /slide/ {
            pow_shield_limit 2 2s;
            pow_shield_difficulty 8b;
        }

        location /off/ {
            pow_shield_limit 2 1h;
            pow_shield_difficulty 8b;
            pow_shield_pay_ahead off;
        }

        location /dry/ {
            pow_shield_limit 1 1h;
            pow_shield_dry_run on;
        }

        location /open/ {
        }
    }
EOF

my @dirs = qw(ahead rise slide off dry open);

###############################################################################

sub get {
    my ($t, $client, $dir, %h) = @_;
    return $t->http_get("/$dir/data.json", 'X-Client' => $client, %h);
}

# The solution of the challenge $r sent ahead.
sub paid_ahead {
    my ($r) = @_;
    my $token = $r->header('X-PoW-Next-Challenge') // '';
    my $p = (decode_token($token) || {})->{payload} || {};
    return ('X-PoW-Challenge' => $token,
        'X-PoW-Nonce' => solve_bits($p->{salt} // '', $p->{bits} // 1));
}

sub next_of { $_[0]->header('X-PoW-Next-Challenge') }

Test::PowShield::Modes->each_mode($conf, nodes => 2, redis => 'timeout=3s',
    files => { map { ("html/$_/data.json" => qq({"dir":"$_"}\n)) } @dirs }, sub {
    my ($mode) = @_;
    my ($t, $other) = ($mode->node(1), $mode->node(2));

    # 1. the last free request carries the next challenge, the first does not
    my $client = "payer-$mode";
    my $first = get($t, $client, 'ahead');
    is($first->status, 200, "$mode: first request: 200");
    ok(!defined next_of($first), "$mode: ... with a free request left: no next challenge");
    my $last = get($t, $client, 'ahead');
    is($last->header('X-RateLimit-Remaining'), 0, "$mode: second: Remaining 0");
    ok(defined next_of($last), "$mode: ... carries X-PoW-Next-Challenge");
    is($last->header('X-PoW-Next-Bits'), 10, "$mode: ... X-PoW-Next-Bits 10");
    is($last->header('X-PoW-Next-Difficulty'), 3, "$mode: ... X-PoW-Next-Difficulty 3");
    my $p = decode_token(next_of($last))->{payload};
    is($p->{bits}, 10, "$mode: ... its payload asks 10 bits");
    ok($p->{exp} > now_ms(), "$mode: ... and has an exp ahead");

    # 2. thirty paid requests, each with the solution sent ahead: thirty 200s
    my ($r, @status, @result, $carried) = ($last);
    for my $n (1 .. 30) {
        my $node = $n % 2 ? $other : $t;
        my %pay = paid_ahead($r);
        $r = get($node, $client, 'ahead', %pay);
        push @status, $r->status;
        push @result, $r->header('X-Result') // '';
        $carried++ if defined next_of($r);
    }
    is(join(' ', @status), join(' ', (200) x 30), "$mode: 30 paid ahead: 30 times 200, no 429");
    is(join(' ', @result), join(' ', ('solved') x 30), "$mode: ... each one solved");
    is($carried, 30, "$mode: ... each response carries the next challenge");
    is($r->header('X-Strikes'), 0, "$mode: ... and no strike");
    my %spent = paid_ahead($last);
    is(get($t, $client, 'ahead', %spent)->status, 409,
        "$mode: a solution sent ahead is spent once: 409 again");

    # 3. the next challenge is priced as the next request will be asked
    {
        my $c = "riser-$mode";
        my $r = get($t, $c, 'rise');
        $r = get($t, $c, 'rise');
        my @ahead;
        for (1 .. 6) {
            push @ahead, $r->header('X-PoW-Next-Bits');
            $r = get($t, $c, 'rise', paid_ahead($r));
        }
        is(join(' ', @ahead), '6 7 7 7 7 8',
            "$mode: rising: the price sent ahead steps with how far over");
        my $asked = $r->header('X-PoW-Next-Bits');
        my $unpaid = get($t, $c, 'rise');
        is($unpaid->status, 429, "$mode: an unpaid request then: 429");
        is($unpaid->header('X-PoW-Bits'), $asked,
            "$mode: ... asking the price the last response sent ahead ($asked)");
        ok(!defined next_of($unpaid), "$mode: ... and a 429 sends no next challenge");
    }

    # 4. under the limit a solution sent ahead passes unspent
    {
        my $c = "slider-$mode";
        get($t, $c, 'slide');
        my $r = get($t, $c, 'slide');
        my %pay = paid_ahead($r);
        sleep 2.2;
        my $green = get($other, $c, 'slide', %pay);
        is($green->status, 200, "$mode: the window slid: the paid request passes");
        is($green->header('X-Result'), 'pass', "$mode: ... as green");
        ok(defined next_of($green), "$mode: ... a paid response carries the next one");
        get($t, $c, 'slide');
        my $over = get($t, $c, 'slide', %pay);
        is($over->status, 200, "$mode: over the limit, the same solution still pays");
        is($over->header('X-Result'), 'solved', "$mode: ... it was not spent under the limit");
    }

    # 5. pay-ahead off, dry runs and unshielded locations send none
    {
        my $c = "plain-$mode";
        get($t, $c, 'off');
        my $r = get($t, $c, 'off');
        is($r->header('X-RateLimit-Remaining'), 0, "$mode: off: Remaining 0");
        ok(!defined next_of($r), "$mode: ... and no next challenge");
        my $asked = get($t, $c, 'off');
        is($asked->status, 429, "$mode: ... the next request is a 429");
        my $paid = get($t, $c, 'off', solution($asked));
        is($paid->status, 200, "$mode: ... paid: 200");
        ok(!defined next_of($paid), "$mode: ... still no next challenge");
        my @dry = map { next_of(get($t, $c, 'dry')) } 1 .. 3;
        ok(!grep({ defined } @dry), "$mode: a dry run sends none");
        ok(!defined next_of(get($t, $c, 'open')), "$mode: an unshielded location sends none");
    }

    # 6. a challenge sent ahead by another location is no payment there,
    # and no offence: the 429 path, whose strike paying takes back
    {
        my $c = "wanderer-$mode";
        get($t, $c, 'ahead');
        my $ahead = get($t, $c, 'ahead');
        get($t, $c, 'slide') for 1 .. 2;
        my $elsewhere = get($other, $c, 'slide', paid_ahead($ahead));
        is($elsewhere->status, 429, "$mode: /ahead/'s next challenge at /slide/: a 429, not a 409");
        is($elsewhere->header('X-Strikes'), 1, "$mode: ... with the 429's strike");
        my $paid = get($t, $c, 'slide', solution($elsewhere));
        is($paid->status, 200, "$mode: ... paid: 200");
        is($paid->header('X-Strikes'), 0, "$mode: ... and the strike is taken back");
        is(get($t, $c, 'ahead', paid_ahead($ahead))->header('X-Result'), 'solved',
            "$mode: /ahead/'s solution still pays at /ahead/");
    }

    # 7. ... nor from the address the client had before (dual stack, NAT)
    {
        my $c = "mover-$mode";
        get($t, $c, 'ahead', 'X-Real-IP' => '192.0.2.7');
        my $ahead = get($t, $c, 'ahead', 'X-Real-IP' => '192.0.2.7');
        my $moved = get($other, $c, 'ahead', 'X-Real-IP' => '192.0.2.8', paid_ahead($ahead));
        is($moved->status, 429, "$mode: paid ahead from another address: a 429, not a 403");
        my $paid = get($t, $c, 'ahead', 'X-Real-IP' => '192.0.2.8', solution($moved));
        is($paid->status, 200, "$mode: ... paid from there: 200");
        is($paid->header('X-Strikes'), 0, "$mode: ... and no strike is left");
    }
});

Test::PowShield::Modes->done_testing;
