#!/usr/bin/perl

# Difficulty in bits (docs/directives.md pow_shield_difficulty, docs/protocol.md
# section 5): a `b` suffix prices a challenge in leading zero bits. The 429
# says X-PoW-Bits beside X-PoW-Difficulty (ceil(bits/4)), the token carries
# both; a nonce with exactly the bits is accepted, one bit short is not;
# rising difficulty steps one bit; $pow_shield_bits logs the price. The
# old CLI (hex digits only) still pays a bits challenge, and the new CLI
# pays an old server's hex challenge (both where the prebuilt old build
# is present: TEST_POW_SHIELD_OLD_DIR, default /work/wt-old/objs).
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

my $cli = $ENV{TEST_POW_SHIELD_CLI} // "$Test::PowShield::REPO/objs/pow-shield";
my $old = $ENV{TEST_POW_SHIELD_OLD_DIR} // '/work/wt-old/objs';

my $t;    # the node of the mode under test (each_mode below)

my $conf = http_conf(<<'EOF');
    %%REDIS%%

    log_format bits '$http_x_client $status $pow_shield_bits $pow_shield_difficulty';

    server {
        %%TEST_SERVER%%
        access_log %%TESTDIR%%/bits.log bits;

        pow_shield_key $http_x_client;
        pow_shield_strikes off;

        location /bits/ {
            pow_shield_limit 1 1h;
            pow_shield_difficulty 10b;
        }

        location /rise/ {
            pow_shield_limit 1 1h;
            pow_shield_difficulty 6b max=9b;
        }

        location /hex/ {
            pow_shield_limit 1 1h;
            pow_shield_difficulty 1 max=3;
        }
    }
EOF

my %files = map { ("html/$_/data.json" => qq({"dir":"$_"}\n)) } qw(bits rise hex);
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

sub prices {
    my ($client, $dir, $n) = @_;
    get($client, $dir);
    my @bits;
    for (1 .. $n) {
        my $c = get($client, $dir);
        push @bits, ($c->header('X-PoW-Bits') // 'none') . '/'
            . ($c->header('X-PoW-Difficulty') // 'none');
    }
    return join ' ', @bits;
}

sub cli_get {
    my ($bin, $base, $client, $dir) = @_;
    my ($out, $err) = map { $t->path("cli.$_") } qw(out err);
    my $pid = fork // die "fork: $!";
    if (!$pid) {
        open STDOUT, '>', $out or die "$out: $!";
        open STDERR, '>', $err or die "$err: $!";
        exec $bin, 'get', '-v', '-H', "X-Client: $client", "$base/$dir/data.json";
        exit 127;
    }
    waitpid($pid, 0);
    return ($? >> 8, $t->read_file('cli.out'), $t->read_file('cli.err'));
}

###############################################################################

Test::PowShield::Modes->each_mode($conf, redis => 'timeout=3s', files => \%files, sub {
    my ($m) = @_;
    $t = $m->node(1);

    # the challenge says both prices

    my $r = challenged('say', 'bits');
    is($r->status, 429, 'bits: over the limit, 429');
    is($r->header('X-PoW-Bits'), '10', 'bits: X-PoW-Bits is the price in bits');
    is($r->header('X-PoW-Difficulty'), '3', 'bits: X-PoW-Difficulty is ceil(10/4) hex digits');
    my $body = $r->json;
    is($body->{bits}, 10, 'bits: the body has bits');
    is($body->{difficulty}, 3, 'bits: the body has difficulty ceil(bits/4)');
    like($body->{instructions}, qr/10 zero bits/, 'bits: the instructions speak bits');
    my $payload = decode_token($r->header('X-PoW-Challenge'))->{payload};
    is($payload->{bits}, 10, 'bits: the signed token carries bits');
    is($payload->{difficulty}, 3, 'bits: and difficulty ceil(bits/4)');

    # exactly the bits pay; one bit short does not

    {
        my $tok = $r->header('X-PoW-Challenge');
        my $salt = $payload->{salt};
        my $exact = solve_bits($salt, 10, exact => 1);
        is(zero_bits($salt, $exact), 10, 'bits: the nonce has exactly 10 zero bits');
        ok(!hash_ok($salt, $exact, 3), 'bits: so it lacks the 3 hex zeros');
        my $short = solve_bits($salt, 9, exact => 1);
        my $refused = get('say', 'bits', 'X-PoW-Challenge' => $tok, 'X-PoW-Nonce' => $short);
        is($refused->status, 422, 'bits: a nonce one bit short is an incorrect solution');
        is(get('say', 'bits', 'X-PoW-Challenge' => $tok, 'X-PoW-Nonce' => $exact)->status,
            200, 'bits: a nonce with exactly the bits is accepted');
    }

    # an old-style (hex) solution of a bits challenge pays too

    {
        my $c = challenged('hexpay', 'bits');
        my $p = decode_token($c->header('X-PoW-Challenge'))->{payload};
        my $nonce = solve($p->{salt}, $p->{difficulty});
        is(get('hexpay', 'bits', 'X-PoW-Challenge' => $c->header('X-PoW-Challenge'),
            'X-PoW-Nonce' => $nonce)->status, 200,
            'bits: a nonce with difficulty hex zeros (an old client) is accepted');
    }

    # rising difficulty in bits steps one bit (x2 work) per step, hex one digit

    # With a limit of 1, the n-th refusal is n times over: base + step *
    # floor(log2(1 + n)).
    is(prices('rise', 'rise', 8), '7/2 7/2 8/2 8/2 8/2 8/2 9/3 9/3',
        'rise: 6b max=9b adds one bit per doubling of the refused volume');
    is(prices('rise-hex', 'hex', 8), '8/2 8/2 12/3 12/3 12/3 12/3 12/3 12/3',
        'rise: 1 max=3 adds a hex digit (4 bits) per step');

    # a solved request logs the price it paid, not the location's base

    {
        get('risepay', 'rise');
        my $c;
        $c = get('risepay', 'rise') for 1 .. 3;
        is($c->header('X-PoW-Bits'), '8', 'premise: the third refusal asks 8 bits');
        my $p = decode_token($c->header('X-PoW-Challenge'))->{payload};
        is(get('risepay', 'rise', 'X-PoW-Challenge' => $c->header('X-PoW-Challenge'),
            'X-PoW-Nonce' => solve_bits($p->{salt}, 8))->status, 200, 'premise: paid');
        like($t->read_file('bits.log'), qr/^risepay 200 8 2$/m,
            'log: $pow_shield_bits of a solved request is the 8 bits it paid, not the base 6');
    }

    # $pow_shield_bits and $pow_shield_difficulty in the log

    like($t->read_file('bits.log'), qr/^say 429 10 3$/m,
        'log: $pow_shield_bits 10 and $pow_shield_difficulty 3 for the 429');

    # the CLIs: the new one solves for bits, an old one (hex) still pays

    my $base = 'http://127.0.0.1:' . $t->port(8080);

    SKIP: {
        skip "no $cli (make build)", 2 unless -x $cli;
        get('newcli', 'bits');
        my ($rc, $out) = cli_get($cli, $base, 'newcli', 'bits');
        is($rc, 0, 'new CLI: pays a bits challenge');
        is($out, qq({"dir":"bits"}\n), 'new CLI: the body of the paid request');
    }

    SKIP: {
        skip "no old CLI in $old", 2 unless -x "$old/pow-shield";
        get('oldcli', 'bits');
        my ($rc, $out) = cli_get("$old/pow-shield", $base, 'oldcli', 'bits');
        is($rc, 0, 'old CLI (hex digits only): pays a bits challenge');
        is($out, qq({"dir":"bits"}\n), 'old CLI: the body of the paid request');
    }
});

# the new CLI against an old server (hex tokens without bits): a CLI
# question, asked of a local-mode server once

SKIP: {
    skip "no old nginx and module in $old", 3
        unless -x "$old/nginx" && -f "$old/ngx_http_pow_shield_module.so" && -x $cli;
    my $o = Test::PowShield->new(binary => "$old/nginx",
        module => "$old/ngx_http_pow_shield_module.so");
    $o->write_file_expand('nginx.conf', http_conf(<<'EOF'));
    server {
        %%TEST_SERVER%%
        pow_shield_key $http_x_client;
        pow_shield_strikes off;

        location /hex/ {
            pow_shield_limit 1 1h;
            pow_shield_difficulty 3;
        }
    }
EOF
    $o->write_file('html/hex/data.json', qq({"dir":"old"}\n));
    $o->run;
    my $c = $o->http_get('/hex/data.json', 'X-Client' => 'x');
    $c = $o->http_get('/hex/data.json', 'X-Client' => 'x');
    ok(!defined $c->header('X-PoW-Bits'), 'old server: no X-PoW-Bits');
    my $obase = 'http://127.0.0.1:' . $o->port(8080);
    my ($rc, $out) = cli_get($cli, $obase, 'newcli', 'hex');
    is($rc, 0, 'new CLI: pays an old server\'s hex challenge (4 bits a digit)');
    is($out, qq({"dir":"old"}\n), 'new CLI: the old server\'s body');
}

###############################################################################

Test::PowShield::Modes->done_testing;
