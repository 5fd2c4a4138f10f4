#!/usr/bin/perl

# A zone full of spent challenges (docs/operations.md, "Sizing the zone"): a
# spent record is never given up before its token expires, and spent records
# take at most half the zone.  Once that half is full, a solution that
# cannot be recorded is never let through: its payer gets a fresh 429
# challenge (no 5xx), while new clients still get their bucket and a 200.
# Whatever the zone does, no token is accepted twice: in local mode, and in
# cluster mode deciding locally while Redis is down (pow_shield_fail local).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Test::PowShield qw(:pow http_conf);
use Test::PowShield::Modes;

###############################################################################

my $conf = http_conf(<<'EOF', workers => 2);
    pow_shield_secret "zone-full-suite-secret-0123456789abcdef";
    pow_shield_zone 32k;
    %%REDIS%%

    server {
        %%TEST_SERVER%%

        location /api/ {
            pow_shield_limit 1 1d;
            pow_shield_difficulty 1;
            # This suite is about the limiter, not the circuit breaker.
            pow_shield_strikes off;
            pow_shield_key $http_x_client;
            pow_shield_fail local;
        }
    }
EOF

###############################################################################

my $CLIENTS = 300;

sub get {
    my ($t, $client, %h) = @_;
    return $t->http_get('/api/data.json', 'X-Client' => $client, %h);
}

# a solved challenge of $client, who is over the limit afterwards
sub solved {
    my ($t, $client) = @_;
    get($t, $client);
    return solution(get($t, $client));
}

sub fill_and_replay {
    my ($t, $mode) = @_;

    # 200s per token, over every use of it
    my (%accepted, @solutions, @first);
    my $use = sub {
        my ($client, $sol) = @_;
        my $r = get($t, $client, %$sol);
        $accepted{$sol->{'X-PoW-Challenge'}}++ if ($r->status // 0) == 200;
        return $r;
    };

    for my $i (1 .. $CLIENTS) {
        my %sol = solved($t, "c$i");
        push @solutions, ["c$i", \%sol];
        push @first, $use->("c$i", \%sol);
    }

    my @refused = grep { ($_->status // 0) == 429 } @first;
    ok(scalar(grep { ($_->status // 0) == 200 } @first),
        "$mode: solutions are accepted while the zone has room");
    ok(@refused, "$mode: $CLIENTS solutions in a 32k zone: then a solution gets a fresh challenge")
        or diag(join ' ', map { $_->status // 'none' } @first);
    is(scalar(grep { ($_->status // 0) >= 500 } @first), 0,
        "$mode: and never a 5xx")
        or diag(join ' ', map { $_->status // 'none' } @first);

    my $r = $refused[0] // get($t, 'none');
    ok($r->header('X-PoW-Challenge'), "$mode: the refused payer's 429 carries a fresh challenge");
    is(get($t, 'new-client')->status, 200, "$mode: a new client still gets 200");

    # replay every solution, twice, each from a client over its limit (a
    # forgotten bucket would otherwise pass the request without any token)

    for my $round (1 .. 2) {
        for (@solutions) {
            my ($client, $sol) = @$_;
            get($t, $client);
            $use->($client, $sol);
        }
    }

    my @twice = grep { $accepted{$_} > 1 } keys %accepted;
    is(scalar @twice, 0,
        "$mode: no solution is accepted twice, however full the zone");

}

Test::PowShield::Modes->each_mode($conf,
    files => { 'html/api/data.json' => qq({"ok":true}\n) }, sub {
    my ($m) = @_;
    # cluster mode with its Redis gone: every request is decided by the zone
    $m->node(1)->kill_redis if $m->cluster;
    fill_and_replay($m->node(1), $m->cluster ? "$m: Redis down, fail local" : "$m");
});

###############################################################################

Test::PowShield::Modes->done_testing;
