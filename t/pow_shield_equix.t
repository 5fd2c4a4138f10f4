#!/usr/bin/perl

# pow_shield_work equix (docs/equix.md, docs/protocol.md section 5): an
# Equi-X location's 429 names its algorithm (X-PoW-Algorithm, the body's
# algorithm, the token's alg); a nonce with its Equi-X solution
# (X-PoW-Solution) pays it; a random solution, a SHA-256 nonce alone and a
# solution moved to another token are 422 with a fresh challenge, a replay
# 409; the challenge sent ahead names the algorithm too and pays one
# request without a 429; the CLI and the Rust library pay 10 requests over
# the limit there; a SHA-256 location beside it is unchanged.
#
# Every assertion in local mode and in cluster mode (Test::PowShield::Modes
# each_mode: the zone, then a Redis of the suite's own).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Test::PowShield qw(:pow :util);
use Test::PowShield::Modes;

###############################################################################

my $REPO = $Test::PowShield::REPO;
my $cli = $ENV{TEST_POW_SHIELD_CLI} // "$REPO/objs/pow-shield";
my $pay_loop = $ENV{TEST_POW_SHIELD_PAY_LOOP} // "$REPO/objs/pay_loop";
plan(skip_all => "no $cli or $pay_loop (make build)") unless -x $cli && -x $pay_loop;

my $PAID = 10;
my $N = 1 + $PAID;

my $t;    # the node of the mode under test (each_mode below)

my $conf = http_conf(<<'EOF');
    %%REDIS%%

    log_format work '$http_x_client $status $pow_shield_result';

    server {
        %%TEST_SERVER%%
        access_log %%TESTDIR%%/work.log work;

        pow_shield_key $http_x_client;

        location /equix/ {
            pow_shield_limit 1 1h;
            pow_shield_work equix;
            pow_shield_difficulty 2b;
        }

        location /sha/ {
            pow_shield_limit 1 1h;
            pow_shield_difficulty 8b;
        }
    }
EOF

my %files = map { ("html/$_/data.json" => qq({"dir":"$_"}\n)) } qw(equix sha);

###############################################################################

sub get {
    my ($client, $dir, %h) = @_;
    return $t->http_get("/$dir/data.json", 'X-Client' => $client, %h);
}

# A 429 for a new client of $dir (its first request passes).
sub challenged {
    my ($client, $dir) = @_;
    get($client, $dir);
    return get($client, $dir);
}

# The CLI's answer to an Equi-X token: (nonce, solution).
sub solve_equix {
    my ($token) = @_;
    my ($rc, $out, $err) = $t->run_argv($cli, 'solve', $token);
    die "pow-shield solve: exit $rc: $err" if $rc;
    my ($nonce, $solution) = split ' ', $out;
    return ($nonce, $solution);
}

sub paid {
    my ($client, $dir, $token, $nonce, $solution) = @_;
    return get($client, $dir, 'X-PoW-Challenge' => $token, 'X-PoW-Nonce' => $nonce,
        defined $solution ? ('X-PoW-Solution' => $solution) : ());
}

sub fresh_equix_challenge {
    my ($r, $what) = @_;
    ok(defined $r->header('X-PoW-Challenge'), "$what: with a fresh challenge");
    is($r->header('X-PoW-Algorithm'), 'equix', "$what: which names Equi-X");
}

# What the server saw from one client: "<status> <result>" counts.
sub seen {
    my ($client) = @_;
    my %n;
    for (split /\n/, $t->read_file('work.log')) {
        $n{$1}++ if /^\Q$client\E (\S+ \S+)$/;
    }
    return join ', ', map { "$_ x$n{$_}" } sort keys %n;
}

###############################################################################

Test::PowShield::Modes->each_mode($conf, redis => 'timeout=3s', files => \%files, sub {
    my ($m) = @_;
    $t = $m->node(1);
    my $mode = $m->name;

    # the 429 names the algorithm

    my $r = challenged('names', 'equix');
    is($r->status, 429, "$mode: over the limit of an Equi-X location, 429");
    is($r->header('X-PoW-Algorithm'), 'equix', "$mode: X-PoW-Algorithm: equix");
    is($r->header('X-PoW-Bits'), '2', "$mode: at the location's 2 bits");
    is($r->json->{algorithm}, 'equix', "$mode: the body's algorithm is equix");
    like($r->json->{instructions}, qr/X-PoW-Solution/, "$mode: the instructions say how to pay");
    is(decode_token($r->header('X-PoW-Challenge'))->{payload}{alg}, 'equix',
        "$mode: the signed token carries alg equix");

    # a nonce and its solution pay once; the replay is 409

    my $token = $r->header('X-PoW-Challenge');
    my ($nonce, $solution) = solve_equix($token);
    like($solution // '', qr/^[A-Za-z0-9_-]{22}$/, "$mode: a solution is 22 base64url characters");
    $r = paid('names', 'equix', $token, $nonce, $solution);
    is($r->status, 200, "$mode: the nonce with its Equi-X solution pays the request");
    $r = paid('names', 'equix', $token, $nonce, $solution);
    is($r->status, 409, "$mode: the same solution again is a replay, 409");
    fresh_equix_challenge($r, "$mode: the replay");

    # wrong payments are 422 with a fresh challenge

    $r = challenged('random', 'equix');
    my $random = b64url_encode(join '', map { chr int rand 256 } 1 .. 16);
    $r = paid('random', 'equix', $r->header('X-PoW-Challenge'), '1', $random);
    is($r->status, 422, "$mode: a random solution is 422");
    fresh_equix_challenge($r, "$mode: the 422 of a random solution");

    $r = challenged('sha-nonce', 'equix');
    $token = $r->header('X-PoW-Challenge');
    my $sha_nonce = solve_bits(decode_token($token)->{payload}{salt}, 2);
    $r = paid('sha-nonce', 'equix', $token, $sha_nonce);
    is($r->status, 422, "$mode: a SHA-256 nonce alone for an Equi-X challenge is 422");
    fresh_equix_challenge($r, "$mode: the 422 of a SHA-256 nonce");

    $r = challenged('moved', 'equix');
    my ($n1, $s1) = solve_equix($r->header('X-PoW-Challenge'));
    my $other = get('moved', 'equix')->header('X-PoW-Challenge');
    $r = paid('moved', 'equix', $other, $n1, $s1);
    is($r->status, 422, "$mode: a solution moved to another token is 422");
    fresh_equix_challenge($r, "$mode: the 422 of a moved solution");
    is(paid('moved', 'equix', $other, $n1 + 1, $s1)->status, 422,
        "$mode: and a solution sent with another nonce is 422");

    # paying ahead: the next challenge names Equi-X and pays without a 429

    $r = challenged('ahead', 'equix');
    ($nonce, $solution) = solve_equix($r->header('X-PoW-Challenge'));
    $r = paid('ahead', 'equix', $r->header('X-PoW-Challenge'), $nonce, $solution);
    my $next = $r->header('X-PoW-Next-Challenge');
    ok(defined $next, "$mode: a paid response carries the next challenge");
    is($r->header('X-PoW-Algorithm'), 'equix', "$mode: with X-PoW-Algorithm: equix");
    ($nonce, $solution) = solve_equix($next);
    $r = paid('ahead', 'equix', $next, $nonce, $solution);
    is($r->status, 200, "$mode: the challenge sent ahead pays the next request");
    is(seen('ahead'), '200 pass x1, 200 solved x2, 429 challenge x1',
        "$mode: the request paid ahead met no 429");

    # the CLI and the Rust library pay 10 requests over the limit

    my $url = 'http://127.0.0.1:' . $t->port(8080) . '/equix/data.json';
    my ($rc, $out, $err) = $t->run_argv($cli, 'get', '-sS', '-H', 'X-Client: cli',
        ($url) x $N);
    is($rc, 0, "$mode: the CLI gets $N URLs") or diag($err);
    is(seen('cli'), "200 pass x1, 200 solved x$PAID", "$mode: the CLI paid $PAID in Equi-X");
    for my $client (['blocking', '--blocking'], ['middleware']) {
        my ($name, @flags) = @$client;
        ($rc, $out, $err) = $t->run_argv($pay_loop, @flags, $url, $N, "X-Client: rust-$name");
        my @got = map { s/^\d+ //r } split /\n/, $out;
        is("@got", join(' ', (200) x $N), "$mode: $name: $N requests all end 200")
            or diag("exit $rc; stderr: $err");
        is(seen("rust-$name"), "200 pass x1, 200 solved x$PAID",
            "$mode: $name: $PAID paid in Equi-X");
    }

    # a SHA-256 location beside it is unchanged

    $r = challenged('sha', 'sha');
    is($r->status, 429, "$mode: the SHA-256 location challenges");
    ok(!defined $r->header('X-PoW-Algorithm'), "$mode: without X-PoW-Algorithm");
    is($r->json->{algorithm}, 'sha256', "$mode: its body's algorithm is sha256");
    ok(!exists decode_token($r->header('X-PoW-Challenge'))->{payload}{alg},
        "$mode: its token has no alg");
    $token = $r->header('X-PoW-Challenge');
    $r = paid('sha', 'sha', $token, solve_bits(decode_token($token)->{payload}{salt}, 8));
    is($r->status, 200, "$mode: a SHA-256 nonce pays it as before");
});

###############################################################################

Test::PowShield::Modes->done_testing;
