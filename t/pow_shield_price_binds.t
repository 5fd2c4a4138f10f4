#!/usr/bin/perl

# The price binds (docs/protocol.md 4, "What a token binds"; 7.4): a token
# buys one request only under the price policy that issued it, for the
# client key it was issued to; paying takes back its own 429's strike and
# no other; a client that waits out every Retry-After is never blocked; a
# dry run enforces nothing anywhere.  Local mode and cluster mode (two
# nodes on one Redis).

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
    pow_shield_secret "price-binds-suite-secret-0123456789abcdef";
    %%REDIS%%

    server {
        %%TEST_SERVER%%

        add_header X-Result $pow_shield_result always;
        add_header X-Strikes $pow_shield_strikes always;

        pow_shield_key $http_x_client;

        location /rise/ {
            pow_shield_limit 2 1h;
            pow_shield_difficulty 2 max=4;
            pow_shield_strikes off;
        }

        location /flat/ {
            pow_shield_limit 3 1h;
            pow_shield_difficulty 1;
            pow_shield_strikes off;
        }

        location /dear/ {
            pow_shield_limit 1 1h;
            pow_shield_difficulty 1;
        }

        location /cheap/ {
            pow_shield_limit 2 1h;
            pow_shield_difficulty 1;
            pow_shield_strikes off;
        }

        location /second/ {
            pow_shield_limit 1 1s;
            pow_shield_difficulty 1;
        }

        location /dry/ {
            pow_shield_limit 3 1h;
            pow_shield_difficulty 1;
            pow_shield_dry_run on;
        }

        location /enforced/ {
            pow_shield_limit 3 1h;
            pow_shield_difficulty 1;
        }
    }
EOF

my @dirs = qw(rise flat dear cheap second dry enforced);

###############################################################################

sub get {
    my ($t, $client, $dir, %h) = @_;
    return $t->http_get("/$dir/data.json", 'X-Client' => $client, %h);
}

# A solution of $r's challenge proving $bits zero bits (more than it asks).
sub solved_to {
    my ($r, $bits) = @_;
    my $token = $r->header('X-PoW-Challenge') // '';
    my $salt = ((decode_token($token) || {})->{payload} || {})->{salt} // '';
    return ('X-PoW-Challenge' => $token, 'X-PoW-Nonce' => solve_bits($salt, $bits));
}

Test::PowShield::Modes->each_mode($conf, nodes => 2, redis => 'timeout=3s',
    files => { map { ("html/$_/data.json" => qq({"dir":"$_"}\n)) } @dirs }, sub {
    my ($mode) = @_;
    my ($t, $other) = ($mode->node(1), $mode->node(2));

    # 1. a cheap location's token buys nothing at a dear one
    {
        my $client = "adversary-$mode";
        get($t, $client, 'rise') for 1 .. 40;
        my $dear = get($t, $client, 'rise');
        is($dear->status, 429, "$mode: after 40 unpaid requests /rise asks");
        cmp_ok($dear->header('X-PoW-Bits'), '>', 8, "$mode: ... more than 8 bits");
        get($t, $client, 'flat') for 1 .. 3;
        my $cheap = get($t, $client, 'flat');
        is($cheap->header('X-PoW-Bits'), 4, "$mode: /flat asks 4 bits");
        # /flat counts no strikes: its challenge counted none, as one sent
        # ahead does, so it is no payment at /rise, and no offence either:
        # the 429 path (docs/protocol.md 6, "Paying ahead").
        my $r = get($other, $client, 'rise', solved_to($cheap, 8));
        is($r->status, 429, "$mode: a /flat token solved to 8 bits at /rise: 429, no payment");
        unlike($r->body, qr/Challenge was issued for another location/,
            "$mode: ... and no verification failure");
        ok($r->header('X-PoW-Challenge'), "$mode: ... with a fresh challenge");
        cmp_ok($r->header('X-PoW-Bits'), '>=', 8, "$mode: ... at /rise's price");
        is(get($other, $client, 'rise', solution($dear))->status, 200,
            "$mode: /rise's own token, paid at its price: 200");
    }

    # 2. a cheap payment erases no strike earned elsewhere
    {
        my ($cheat, $control) = ("cheat-$mode", "control-$mode");
        get($t, $_, 'dear') for $cheat, $control;
        get($t, $cheat, 'cheap') for 1 .. 2;
        my (@cheat, @control);
        for my $round (1 .. 10) {
            push @cheat, get($t, $cheat, 'dear')->status;
            push @control, get($t, $control, 'dear')->status;
            my $c = get($t, $cheat, 'cheap');
            get($other, $cheat, 'cheap', solution($c)) if $c->status == 429;
        }
        is(join(' ', @control), '429 429 429 429 429 403 403 403 403 403',
            "$mode: ignoring /dear: blocked at the 6th");
        is(join(' ', @cheat), join(' ', @control),
            "$mode: ignoring /dear, paying /flat-like /cheap: blocked at the 6th too");
    }

    # 3. one address, two client keys: a token is spent by its own key only
    {
        my ($a, $b) = ("api:5000-$mode", "api:37644-$mode");
        get($t, $_, 'dear') for $a, $b;
        my $c = get($t, $a, 'dear');
        my $r = get($other, $b, 'dear', solution($c));
        is($r->status, 403, "$mode: key B spends key A's token: 403");
        like($r->body, qr/Challenge was not issued for this client/,
            "$mode: ... Challenge was not issued for this client");
        is(get($other, $a, 'dear', solution($c))->status, 200,
            "$mode: key A spends it: 200");
        is(get($t, $a, 'dear', solution($c))->status, 409, "$mode: ... once");
    }

    # 4. waiting out every Retry-After is never blocked
    {
        my $client = "waiter-$mode";
        my @s;
        for my $n (1 .. 14) {
            my $r = get($n % 2 ? $t : $other, $client, 'second');
            push @s, $r->status;
            last if $r->status == 403;
            sleep(($r->header('Retry-After') // 1) + 0.05) if $r->status == 429;
        }
        is(scalar(grep { $_ == 403 } @s), 0,
            "$mode: waiting out each Retry-After: never blocked (@s)");
        cmp_ok(scalar(grep { $_ == 429 } @s), '>=', 5,
            "$mode: ... through more 429s than the strike threshold");
    }

    # 7. a dry run enforces nothing, here or anywhere
    {
        my $client = "dry-$mode";
        my @s = map { get($t, $client, 'dry')->status } 1 .. 12;
        is(join(' ', @s), join(' ', (200) x 12), "$mode: dry run: 12 requests, all 200");
        is(get($t, $client, 'enforced')->status, 200,
            "$mode: then the first request at an enforcing location: 200");
        is(get($other, $client, 'enforced')->status, 200, "$mode: ... at another node too");
    }
});

Test::PowShield::Modes->done_testing;
