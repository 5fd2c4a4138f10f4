#!/usr/bin/perl

# The zone is shared, and no one client, key or bot takes it from the others
# (issue 36 items 1 and 2; docs/operations.md, "Sizing the zone").
# Spent records take at most half of the zone and one key an eighth of that:
#
# - a client paying 400 challenges into a 32k zone (about a hundred
#   entries) gets a fresh 429 once its share is used up, never a 5xx and
#   never a block; every other client, new or known, still gets 200;
# - 300 signed requests of one bot, each with a fresh nonce, take no more
#   than that bot's share: other clients still get 200;
# - a record that lives long (a token of a location whose challenges last
#   10 min) does not hold up the reclaiming of shorter ones made after it:
#   after they expire, a second round of paid requests is accepted again.
#
# Local mode (the zone is the store); the flood also in cluster mode, where
# the zone keeps a copy of what Redis spent.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use File::Temp qw(tempdir);
use Test::More;
use Test::PowShield qw(:pow :util);
use Test::PowShield::Modes;

###############################################################################

my $cli = $ENV{TEST_POW_SHIELD_CLI} // "$Test::PowShield::REPO/objs/pow-shield";
plan(skip_all => "no $cli (make build)") unless -x $cli;

my $keys = tempdir(CLEANUP => 1);
my $directory = `$cli bot-key new $keys/bot.jwk 2>/dev/null`;
die "bot-key new failed\n" unless $? == 0 && $directory =~ /"keys"/;

my $conf = http_conf(<<'EOF', workers => 2);
    pow_shield_secret "zone-share-suite-secret-0123456789abcd";
    pow_shield_zone 32k;
    %%REDIS%%

    pow_shield_bot_keys bot bots/bot.json;

    server {
        %%TEST_SERVER%%

        add_header X-Bot $pow_shield_bot always;

        location /api/ {
            pow_shield_limit 5 1m;
            pow_shield_difficulty 1;
            pow_shield_key $http_x_client;
        }

        location /short/ {
            pow_shield_limit 1 1h;
            pow_shield_difficulty 1;
            pow_shield_challenge_ttl 1s;
            pow_shield_key $http_x_client;
        }

        location /long/ {
            pow_shield_limit 1 1h;
            pow_shield_difficulty 1;
            pow_shield_challenge_ttl 10m;
            pow_shield_key $http_x_client;
        }
    }
EOF

my %files = (
    'html/api/data.json'   => "{}\n",
    'html/short/data.json' => "{}\n",
    'html/long/data.json'  => "{}\n",
    'bots/bot.json'        => $directory,
);

sub get {
    my ($t, $uri, $client, %h) = @_;
    return $t->http_get($uri, 'X-Client' => $client, %h);
}

# $client asks for $uri $n times, paying every challenge it is sent (a
# fresh one included); the statuses of the paid requests.
sub pay {
    my ($t, $uri, $client, $n) = @_;
    my @paid;
    my $r = get($t, $uri, $client);
    for (1 .. $n) {
        # the free requests first (a 200 of a paid one leaves none)
        for (1 .. 10) {
            last if ($r->status // 0) == 429;
            $r = get($t, $uri, $client);
        }
        last unless ($r->status // 0) == 429;
        $r = get($t, $uri, $client, solution($r));
        push @paid, $r->status // 'none';
    }
    return @paid;
}

sub count { my ($status, @s) = @_; scalar grep { $_ eq $status } @s }

Test::PowShield::Modes->each_mode($conf, files => \%files, sub {
    my ($m) = @_;
    my $t = $m->node(1);

    my $known = get($t, '/api/data.json', "$m-known");
    is($known->status, 200, "$m: a client known before the flood");

    my @paid = pay($t, '/api/data.json', "$m-payer", 400);
    is(scalar @paid, 400, "$m: the payer paid 400 challenges");
    is(scalar(grep { /^5/ } @paid), 0, "$m: no paid request gets a 5xx")
        or diag statuses_of(@paid);
    is(count(403, @paid), 0, "$m: the payer is never blocked");
    if (!$m->cluster) {
        ok(count(200, @paid) >= 1 && count(429, @paid) >= 1,
            "$m: paid requests pass until the payer's share of spent records is used up, then get a fresh challenge")
            or diag statuses_of(@paid);
    }

    my @others = map { get($t, '/api/data.json', "$m-new-$_")->status // 'none' } 1 .. 50;
    is(count(200, @others), 50, "$m: after the flood, 50 new clients get 200")
        or diag statuses_of(@others);
    is(get($t, '/api/data.json', "$m-known")->status, 200,
        "$m: and the client known before it too");

    # Local mode only from here: the rest is the zone's own bookkeeping.
    local_only($t) unless $m->cluster;
});

sub local_only {
    my ($t) = @_;

    # One bot's 300 signed requests, each with a fresh nonce good for the
    # longest lifetime accepted (1 h); one good for a day is anonymous.
    my $url = 'http://localhost/api/data.json';
    my $sign = sub {
        my ($lifetime) = @_;
        my $now = time;
        return map { chomp; split /: /, $_, 2 } `$cli bot-key sign --sign-key $keys/bot.jwk $url --created $now --expires @{[ $now + $lifetime ]}`;
    };
    is(get($t, '/api/data.json', 'signed-day', $sign->(86400))->header('X-Bot') // '', '',
        'a signature good for a day is anonymous (its nonce is not kept)');
    my @bot = map { get($t, '/api/data.json', "signed-$_", $sign->(3600))->header('X-Bot') // '' }
        1 .. 300;
    ok(count('bot', @bot) >= 1, 'the bot is recognised while its share lasts');
    ok(count('', @bot) >= 1, 'then its signed requests are anonymous, not refused');
    my @after_bot = map { get($t, '/api/data.json', "after-bot-$_")->status // 'none' } 1 .. 30;
    is(count(200, @after_bot), 30, '300 fresh nonces of one bot leave other clients at 200')
        or diag statuses_of(@after_bot);

    # A 10-minute token's record first, then enough 1 s tokens' records
    # from many clients to fill the spent records' half of the zone.
    is(count(200, pay($t, '/long/data.json', 'long', 1)), 1, 'a 10 min challenge is paid');
    my @round1 = map { pay($t, '/short/data.json', "short-$_", 6) } 1 .. 12;
    ok(count(429, @round1) >= 1, "round 1 fills the spent records' half of the zone")
        or diag statuses_of(@round1);
    is(scalar(grep { /^5/ } @round1), 0, 'round 1: no 5xx');

    # The 1 s tokens' records live until their exp and the 5 s allowance.
    sleep 9;
    my @round2 = map { pay($t, '/short/data.json', "again-$_", 1) } 1 .. 12;
    is(count(200, @round2), 12,
        'round 2: the short records were reclaimed behind the long one, paid requests pass')
        or diag statuses_of(@round2);
}

sub statuses_of { join ' ', @_ }

Test::PowShield::Modes->done_testing;
