#!/usr/bin/perl

# The price follows the key that refuses (docs/directives.md,
# pow_shield_difficulty ... max=; docs/protocol.md 4, "What a token binds"):
# with max=, how far over its limit the refusing limit's key is sets the
# price, a site-wide or /24 key= as much as the client's own; a token
# priced under one location's limits buys nothing at a location whose
# limits count per another key=, however alike their numbers; and the
# next challenge an admitted response sends ahead (Remaining 0) is priced
# from that key's real overage, as its 429 would be.  Local mode and
# cluster mode (one Redis).

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
    pow_shield_secret "price-by-key-suite-secret-0123456789ab";
    %%REDIS%%

    server {
        %%TEST_SERVER%%

        add_header X-Result $pow_shield_result always;

        pow_shield_key $http_x_client;
        pow_shield_difficulty 8b max=20b;

        # the same numbers, per client and site-wide
        location /client/ {
            pow_shield_limit 3 1m;
        }

        location /site/ {
            pow_shield_limit 3 1m key=site;
        }

        # windows short enough to slide within the suite
        location /site-3s/ {
            pow_shield_limit 3 3s key=site;
        }

        location /client-3s/ {
            pow_shield_limit 2 3s;
            pow_shield_strikes off;
        }
    }
EOF

my @dirs = qw(client site site-3s client-3s);

###############################################################################

sub get {
    my ($t, $client, $dir, %h) = @_;
    return $t->http_get("/$dir/data.json", 'X-Client' => $client, %h);
}

# A solution of $r's challenge with the bits it asks.
sub paid {
    my ($r) = @_;
    my $token = $r->header('X-PoW-Challenge') // '';
    my $p = (decode_token($token) || {})->{payload} || {};
    return ('X-PoW-Challenge' => $token,
        'X-PoW-Nonce' => solve_bits($p->{salt} // '', $p->{bits} // 1));
}

Test::PowShield::Modes->each_mode($conf, redis => 'timeout=3s',
    files => { map { ("html/$_/data.json" => qq({"dir":"$_"}\n)) } @dirs }, sub {
    my ($mode) = @_;
    my $t = $mode->node(1);

    # a. 60 clients, one request each, past the site-wide limit of 3
    {
        my @crowd = map { get($t, "crowd-$_-$mode", 'site') } 1 .. 60;
        is(scalar(grep { $_->status == 429 } @crowd), 57,
            "$mode: a crowd of 60 at /site/: 57 refused");
        my $client = "visitor-$mode";
        is(statuses(map { get($t, $client, 'client') } 1 .. 3), '200 200 200',
            "$mode: a visitor's three free requests at /client/");
        my $cheap = get($t, $client, 'client');
        is($cheap->header('X-PoW-Bits'), 8, "$mode: the fourth: a challenge of 8 bits");
        my $dear = get($t, $client, 'site');
        is($dear->status, 429, "$mode: its first request at /site/: 429");
        cmp_ok($dear->header('X-PoW-Bits'), '>=', 12,
            "$mode: ... at the site's price, 12 bits or more");
        my $r = get($t, $client, 'site', paid($cheap));
        is($r->status, 409, "$mode: /client/'s 8-bit token paid at /site/: 409");
        like($r->body, qr/Challenge was issued for another location/,
            "$mode: ... Challenge was issued for another location");
        cmp_ok($r->header('X-PoW-Bits'), '>=', 12, "$mode: ... a fresh one at the site's price");
        is(get($t, $client, 'site', paid($r))->status, 200,
            "$mode: /site/'s own token, paid at its price: 200");
    }

    # b. the site far over its 3 in 3 s: once its window has slid, the
    # response that leaves no free request sends the next challenge at the
    # price its 429 asks
    {
        my @crowd = map { get($t, "crowd-$_-$mode", 'site-3s') } 1 .. 60;
        is(scalar(grep { $_->status == 429 } @crowd), 57,
            "$mode: a crowd of 60 at /site-3s/: 57 refused");
        sleep(($crowd[-1]->header('Retry-After') // 3) + 0.05);
        my $client = "late-visitor-$mode";
        my @r = map { get($t, $client, 'site-3s') } 1 .. 3;
        is(statuses(@r), '200 200 200', "$mode: the window slid: three admitted");
        is($r[2]->header('X-RateLimit-Remaining'), 0, "$mode: ... the third leaves none");
        my $next = $r[2]->header('X-PoW-Next-Bits');
        my $refused = get($t, $client, 'site-3s');
        is($refused->status, 429, "$mode: the next request: 429");
        cmp_ok($refused->header('X-PoW-Bits'), '>=', 12,
            "$mode: ... at the site's price, 12 bits or more");
        is($next, $refused->header('X-PoW-Bits'),
            "$mode: the third response's X-PoW-Next-Bits is that price");
    }

    # the same for a client far over its own limit
    {
        my $client = "persistent-$mode";
        get($t, $client, 'client-3s') for 1 .. 2;
        my @refused = map { get($t, $client, 'client-3s') } 1 .. 30;
        is(scalar(grep { $_->status == 429 } @refused), 30,
            "$mode: a client 30 requests over its 2 in 3 s");
        sleep(($refused[-1]->header('Retry-After') // 3) + 0.05);
        my @r = map { get($t, $client, 'client-3s') } 1 .. 2;
        is(statuses(@r), '200 200', "$mode: its window slid: two admitted");
        my $next = $r[1]->header('X-PoW-Next-Bits');
        my $again = get($t, $client, 'client-3s');
        cmp_ok($again->header('X-PoW-Bits'), '>=', 12,
            "$mode: its next 429 asks 12 bits or more");
        is($next, $again->header('X-PoW-Bits'),
            "$mode: ... and so did the X-PoW-Next-Bits before it");
    }
});

Test::PowShield::Modes->done_testing;
