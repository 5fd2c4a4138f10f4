#!/usr/bin/perl

# A strike is taken back once per refusal, by waiting or by paying (README,
# "The red zone"; docs/protocol.md 7.4): a client that waits out a 429's
# Retry-After is admitted and gets that 429's strike back; paying the same
# 429's token afterwards still buys a request, and takes back nothing more.
# It banks no credit either: five rounds of it later, five ignored
# challenges block the client at the sixth offence, as for anyone.  Local
# mode and cluster mode (two nodes on one Redis).

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
    pow_shield_secret "wait-then-pay-suite-secret-0123456789ab";
    %%REDIS%%

    server {
        %%TEST_SERVER%%

        add_header X-Result $pow_shield_result always;
        add_header X-Strikes $pow_shield_strikes always;

        pow_shield_key $http_x_client;

        # the default breaker: pow_shield_strikes 5 60s
        location /api/ {
            pow_shield_limit 1 3s;
            pow_shield_difficulty 1;
        }
    }
EOF

###############################################################################

sub get {
    my ($t, $client, %h) = @_;
    return $t->http_get('/api/data.json', 'X-Client' => $client, %h);
}

Test::PowShield::Modes->each_mode($conf, nodes => 2, redis => 'timeout=3s',
    files => { 'html/api/data.json' => qq({"ok":true}\n) }, sub {
    my ($mode) = @_;
    my ($t, $other) = ($mode->node(1), $mode->node(2));
    my $client = "waiter-payer-$mode";

    is(get($t, $client)->status, 200, "$mode: the one free request");
    my (@rounds, @strikes);
    for my $round (1 .. 5) {
        my $c = get($t, $client);
        sleep(($c->header('Retry-After') // 3) + 0.05);
        my $waited = get($t, $client);
        my $paid = get($other, $client, solution($c));
        push @rounds, join '/', map { $_->status } $c, $waited, $paid;
        push @strikes, $paid->header('X-Strikes') // 'none';
    }
    is(join(' ', @rounds), join(' ', ('429/200/200') x 5),
        "$mode: five rounds of a 429, its Retry-After waited out (200), "
        . "then its token paid (200)");
    is(join(' ', @strikes), '0 0 0 0 0', "$mode: ... no strike left after any round");

    # Now ignoring every challenge: the sixth offence is blocked, as it is
    # for a client that never waited or paid.  (At one node: with two, a
    # node learns of the other's strikes from Redis within 100 ms.)
    my @ignored;
    for (1 .. 8) {
        my $r = get($t, $client);
        push @ignored, $r->status;
        last if $r->status == 403;
    }
    is(join(' ', @ignored), '429 429 429 429 429 403',
        "$mode: then five ignored challenges, and the sixth offence is blocked");
});

Test::PowShield::Modes->done_testing;
