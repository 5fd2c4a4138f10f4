#!/usr/bin/perl

# A fair price (docs/directives.md, pow_shield_strikes; docs/protocol.md 7.4): a client that
# pays every challenge is never blocked, one request at a time or with
# n - 1 in flight, because spending a solution takes back the strike of
# the 429 that carried it; ignoring challenges still blocks the next
# offence after n; wrong answers and replays are never taken back; and a
# strike never shortens a block another location set.  Every scenario runs
# in local mode and in cluster mode (two nodes on one Redis), with the
# default pow_shield_strikes 5 60s.

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
    pow_shield_secret "fair-price-suite-secret-0123456789abcdef";
    %%REDIS%%

    server {
        %%TEST_SERVER%%

        add_header X-Result $pow_shield_result always;
        add_header X-Strikes $pow_shield_strikes always;

        pow_shield_key $http_x_client;
        pow_shield_difficulty 1;

        # the defaults: pow_shield_strikes 5 60s
        location /api/ {
            pow_shield_limit 2 1h;
        }

        location /long/ {
            pow_shield_limit 1 1h;
            pow_shield_strikes 5 10m;
        }

        location /lenient/ {
            pow_shield_limit 1 1m;
            pow_shield_strikes 100 2s;
        }
    }
EOF

###############################################################################

sub get {
    my ($t, $client, $dir, %h) = @_;
    return $t->http_get("/$dir/data.json", 'X-Client' => $client, %h);
}

# Sends $n requests at once (each on its own connection), then reads them.
sub together {
    my ($t, $client, $dir, @headers) = @_;
    my @socks = map {
        my %h = %{$headers[$_]};
        my $extra = join '', map { "$_: $h{$_}\r\n" } sort keys %h;
        $t->send_request("GET /$dir/data.json HTTP/1.0\r\nHost: localhost\r\n"
            . "X-Client: $client\r\n$extra\r\n");
    } 0 .. $#headers;
    return map { $t->read_response($_) } @socks;
}

sub redis_strikes {
    my ($mode, $client) = @_;
    return $mode->redis->cmd('GET', client_key($client, 's')) // 0;
}

Test::PowShield::Modes->each_mode($conf, nodes => 2, redis => 'timeout=3s',
    files => { map { ("html/$_/data.json" => qq({"dir":"$_"}\n)) } qw(api long lenient) }, sub {
    my ($mode) = @_;
    my ($t, $other) = ($mode->node(1), $mode->node(2));

    # sequential: 2 free, then 50 paid within a minute
    {
        my $client = "payer-$mode";
        is(statuses(map { get($t, $client, 'api') } 1 .. 2), '200 200',
            "$mode: two free requests");
        my (@challenges, @paid);
        for my $n (1 .. 50) {
            my $c = get($t, $client, 'api');
            push @challenges, $c->status;
            # half of them paid at the other node (cluster mode)
            push @paid, get($n % 2 ? $t : $other, $client, 'api', solution($c));
        }
        is(join(' ', grep { $_ != 429 } @challenges), '',
            "$mode: 50 challenges, each a 429");
        is(scalar(grep { $_->status == 200 } @paid), 50,
            "$mode: 50 paid requests, all 200, none blocked");
        is($paid[-1]->header('X-Result'), 'solved', "$mode: ... solved");
        is($paid[-1]->header('X-Strikes'), 0,
            "$mode: paying took back every challenge's strike");
        is(redis_strikes($mode, $client), 0, "$mode: no strike left in Redis")
            if $mode eq 'cluster';
    }

    # n - 1 = 4 requests in flight, each paying its own challenge
    {
        my $client = "parallel-$mode";
        get($t, $client, 'api') for 1 .. 2;
        my $ok = 1;
        for my $round (1 .. 5) {
            my @c = together($t, $client, 'api', map { {} } 1 .. 4);
            $ok &&= is(statuses(@c), '429 429 429 429',
                "$mode: round $round: four challenges at once");
            my @p = together($other, $client, 'api', map { {solution($_)} } @c);
            $ok &&= is(statuses(@p), '200 200 200 200',
                "$mode: round $round: four paid at once, none blocked");
        }
        is(get($t, $client, 'api')->status, 429,
            "$mode: after 20 paid in flight, a challenge, not a block");
    }

    # ignoring: five unanswered 429s, and the next offence is blocked
    my $ignored;
    {
        my $client = "ignorer-$mode";
        get($t, $client, 'api') for 1 .. 2;
        my @r = map { get($t, $client, 'api') } 1 .. 5;
        is(statuses(@r), '429 429 429 429 429', "$mode: five challenges ignored");
        $ignored = $r[4];
        my $r = get($other, $client, 'api');
        is($r->status, 403, "$mode: the sixth offence is blocked");
        is($r->header('X-PoW-Shield'), 'blocked', "$mode: ... X-PoW-Shield: blocked");

        # while blocked, paying changes nothing
        $r = get($other, $client, 'api', solution($ignored));
        is($r->status, 403, "$mode: blocked: a valid solution is blocked too");
        is($r->header('X-Strikes'), 5, "$mode: ... and takes no strike back");
        is(redis_strikes($mode, $client), 5, "$mode: ... none in Redis either")
            if $mode eq 'cluster';
        # (tokens are bound to the client key: another key of the address
        # cannot spend it)
        get($t, "spender-$mode", 'api') for 1 .. 2;
        is(get($t, "spender-$mode", 'api', solution($ignored))->status, 403,
            "$mode: ... and another key of the address cannot spend it");
    }

    # a wrong answer per paid challenge: those strikes stay
    {
        my $client = "cheat-$mode";
        get($t, $client, 'api') for 1 .. 2;
        my @s;
        for (1 .. 3) {
            my $c = get($t, $client, 'api');
            push @s, $c->status,
                get($t, $client, 'api', solution($c, wrong => 1))->status,
                get($other, $client, 'api', solution($c))->status;
        }
        is("@s", '429 422 200 429 422 200 429 422 200',
            "$mode: three rounds of 429, a wrong answer, then paid");
        my $c = get($t, $client, 'api');
        is($c->header('X-Strikes'), 4, "$mode: one strike per round stays");
        is(get($t, $client, 'api', solution($c, wrong => 1))->status, 422,
            "$mode: the fifth strike");
        is(get($other, $client, 'api', solution($c))->status, 403,
            "$mode: then paying is too late: blocked");
    }

    # paying takes back the 429's strike, never a failed verification's
    {
        my $client = "wrongs-$mode";
        get($t, $client, 'api') for 1 .. 2;
        my $c = get($t, $client, 'api');
        my @w = map { get($t, $client, 'api', solution($c, wrong => 1)) } 1 .. 2;
        is(statuses(@w), '422 422', "$mode: two wrong answers to a challenge");
        my $r = get($other, $client, 'api', solution($c));
        is($r->status, 200, "$mode: the challenge paid");
        is($r->header('X-Strikes'), 2, "$mode: ... takes back the 429's strike only");
        $r = get($t, $client, 'api', solution($w[1]));
        is($r->status, 200, "$mode: a 422's fresh challenge paid");
        is($r->header('X-Strikes'), 2, "$mode: ... takes back no 422's strike");
    }

    # a replay is an offence that paying does not take back
    {
        my $client = "replayer-$mode";
        get($t, $client, 'api') for 1 .. 2;
        my $c = get($t, $client, 'api');
        is(get($t, $client, 'api', solution($c))->status, 200, "$mode: paid once");
        my @r = map { get($_ % 2 ? $t : $other, $client, 'api', solution($c)) } 1 .. 6;
        is(statuses(@r), '409 409 409 409 409 403',
            "$mode: five replays are five strikes, the sixth offence blocked");
    }

    # a strike never shortens a block: block at /long/ (10 min), then one
    # offence at /lenient/ (100 strikes, 2 s)
    {
        my $client = "long-$mode";
        get($t, $client, 'long');
        my @r = map { get($t, $client, 'long') } 1 .. 6;
        is(statuses(@r), '429 429 429 429 429 403', "$mode: blocked at /long/");
        get($t, $client, 'lenient');
        my $r = get($t, $client, 'lenient');
        is($r->status, 429, "$mode: an offence at /lenient/ (not blocked there)");
        is($r->header('X-Strikes'), 6, "$mode: ... the sixth strike");
        ok($mode->redis->cmd('PTTL', client_key($client, 's')) > 60_000,
            "$mode: the strikes keep the 10-minute expiry in Redis")
            if $mode eq 'cluster';

        # past /lenient/'s 2 s: the 10-minute block still holds (in cluster
        # mode, at the node that never saw the client too)
        sleep 2.5;
        is(get($other, $client, 'long')->status, 403,
            "$mode: 2.5 s later the 10-minute block still holds");
    }
});

###############################################################################

Test::PowShield::Modes->done_testing;
