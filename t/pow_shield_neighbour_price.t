#!/usr/bin/perl

# A price a neighbour can pay (issue 38 item 8): the "Scrapers on many
# addresses" recipe of docs/operations.md, as written, prices a /24 by how
# far over its limit it is, up to the ceiling its pow_shield_difficulty
# max= sets, and no further: a /24 sending ten times its limit of the
# recipe (with the recipe's "4 max=6": past four times, 24 bits; uncapped,
# 28 bits from eight times) gets challenges that reach the ceiling and
# never exceed it, and a neighbour of it that sends one request pays at
# most the ceiling too. docs/operations.md, "A price a neighbour can pay",
# says why 24 bits: what one core solves well within the clients' default
# 30 s max_solve_time.
#
# The address of each request is set by realip from X-Real-IP; the /24's
# requests rotate over its 254 addresses, each far under its own limit.
# Both modes.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use List::Util qw(max);
use Test::More;
use Test::PowShield qw(:util http_conf);
use Test::PowShield::Modes;

###############################################################################

my $REPO = $Test::PowShield::REPO;
open my $fh, '<', "$REPO/docs/operations.md" or die "docs/operations.md: $!";
my $ops = do { local $/; <$fh> };
my ($recipe) = $ops =~ /```nginx\n(# Scrapers on many addresses:.*?)```/s
    or die "the recipe of docs/operations.md, \"Scrapers on many addresses\", not found\n";
my ($net) = $recipe =~ /pow_shield_limit (\d+) 1m name=net key=\$pow_shield_net;/
    or die "the recipe's /24 limit (N 1m name=net key=\$pow_shield_net) not found\n";
my ($n, $max) = $recipe =~ /pow_shield_difficulty (\d+) max=(\d+);/
    or die "the recipe's pow_shield_difficulty n max=m (hex digits) not found\n";
my $ceiling = 4 * $max;
is($ceiling, 24, "the recipe's ceiling is the 24 bits its section measures");

my $conf = http_conf(<<"EOF", workers => 2);
    pow_shield_secret "neighbour-price-suite-secret-0123456789ab";
    %%REDIS%%

    set_real_ip_from 127.0.0.1;
    real_ip_header X-Real-IP;

    server {
        %%TEST_SERVER%%

$recipe
    }
EOF

my $k = 0;
Test::PowShield::Modes->each_mode($conf, nodes => 2, redis => 'timeout=3s',
    files => { 'html/api/data.json' => "{}\n" }, sub {
    my ($m) = @_;
    $k++;

    # a fresh /24 per mode: cluster mode's counts are in Redis
    my @bits;
    my %status;
    for my $i (0 .. 10 * $net - 1) {
        my $r = $m->node($i % 2 + 1)->http_get('/api/data.json',
            'X-Real-IP' => "10.$k.1." . (1 + $i % 254));
        $status{$r->status // 'none'}++;
        push @bits, $r->header('X-PoW-Bits') // 'none' if ($r->status // 0) == 429;
    }
    is($status{200}, $net, "$m: the /24 is admitted up to its limit of $net");
    is($status{429}, 9 * $net, "$m: ... and challenged past it, ten times its limit")
        or diag explain \%status;
    is(scalar(grep { !/^\d+$/ } @bits), 0, "$m: every challenge says its bits");
    my @first = grep { /^\d+$/ } @bits[0 .. 9];
    is(max(@first), 4 * $n, "$m: the /24's first challenges ask the recipe's n, "
        . 4 * $n . ' bits');
    is(max(grep { /^\d+$/ } @bits), $ceiling,
        "$m: far over its limit, the /24 is asked the ceiling, $ceiling bits");
    is(scalar(grep { /^\d+$/ && $_ > $ceiling } @bits), 0,
        "$m: ... and never more");

    my $r = $m->node(1)->http_get('/api/data.json', 'X-Real-IP' => "10.$k.1.255");
    is($r->status, 429, "$m: a neighbour's one request is challenged");
    is($r->header('X-PoW-Bits'), $ceiling, "$m: ... at the ceiling, $ceiling bits");
});

###############################################################################

Test::PowShield::Modes->done_testing;
