#!/usr/bin/perl

# A limit per autonomous system (issue 38 item 6): the recipe of
# docs/operations.md, "Per autonomous system", as written. Its command
# (pow-shield asn-geo ip2asn-combined.tsv.gz -o ...) is run on the table of
# t/fixtures/ip2asn-example.tsv (gzipped under the name the command reads),
# and its geo block and server, with the include it wrote, are started with
# the client address set by realip from X-Real-IP. The command says
# "written" (what the doc's reload job greps), "unchanged" when run again
# on the same table, and stops at a malformed line with its file and line
# (exit 1), leaving the old file. Then:
#
# - AS64496 (192.0.2.0/24 and 2001:db8::/32 in the table) past its 600
#   requests a minute, from 300 addresses each under its own 60: every next
#   request of the AS is challenged (429), from an address it never used,
#   IPv4 or IPv6;
# - a client of AS64497 (198.51.100.0/24) passes;
# - addresses the table does not route (203.0.113.0/24: AS 0) are left out
#   of the AS limit only: 660 of their requests pass, more than the AS
#   limit, and each address still has its own 60.
#
# Both modes (in cluster mode the limits live in one Redis).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use File::Temp qw(tempdir);
use Test::More;
use Test::PowShield qw(:util http_conf);
use Test::PowShield::Modes;

###############################################################################

my $REPO = $Test::PowShield::REPO;
my $cli = $ENV{TEST_POW_SHIELD_CLI} // "$REPO/objs/pow-shield";
plan(skip_all => "no $cli (make build)") unless -x $cli;

open my $fh, '<', "$REPO/docs/operations.md" or die "docs/operations.md: $!";
my $ops = do { local $/; <$fh> };
my ($section) = $ops =~ /^### Per autonomous system\n(.*?)^#{2,3} /ms
    or die "docs/operations.md: \"Per autonomous system\" not found\n";
my ($command) = $section =~ /```sh\n(pow-shield asn-geo [^\n]*)\n```/
    or die "the recipe's pow-shield asn-geo command not found\n";
my ($recipe) = $section =~ /```nginx\n(# Per autonomous system:.*?)```/s
    or die "the recipe's nginx block not found\n";

# The command as written, from a directory holding the table under its name.
my ($table, $include) = $command =~ /^pow-shield asn-geo (\S+) -o (\S+)$/
    or die "the command is not \"pow-shield asn-geo TABLE -o FILE\": $command\n";
my $dir = tempdir('pow-shield-as-XXXXXXXX', TMPDIR => 1, CLEANUP => 1);
my $fixture = "$REPO/t/fixtures/ip2asn-example.tsv";
if ($table =~ /\.gz$/) {
    system("gzip -c '$fixture' > '$dir/$table'") == 0 or die "gzip: $?\n";
} else {
    system('cp', $fixture, "$dir/$table") == 0 or die "cp: $?\n";
}
(my $argv = $command) =~ s/^pow-shield /'$cli' /;
$argv =~ s/ -o \Q$include\E$/ -o '$dir\/as.conf'/;
my $out = `cd '$dir' && $argv 2>&1`;
is($?, 0, "the recipe's command runs: $command") or diag $out;
like($out, qr/written: \d+ networks/, '... and says what it wrote');
my $geo = do { local (@ARGV, $/) = "$dir/as.conf"; <> } // '';
like($geo, qr{^192\.0\.2\.0/24 AS64496;$}m, 'the include names the AS of a network');
like($geo, qr{^2001:db8::/32 AS64496;$}m, '... IPv6 too');
unlike($geo, qr{^203\.0\.113\.}m, '... and leaves the unrouted range out');

my $v4 = `'$cli' asn-geo - --only-v4 < '$dir/$table'`;
my @v4 = grep { !/^#/ } split /\n/, $v4;
my @want = grep { !/^#/ && !/:/ } split /\n/, $geo;
ok(@want && "@v4" eq "@want",
    '- reads the table from stdin (gzipped too), --only-v4 keeps the IPv4 networks')
    or diag $v4;

$out = `cd '$dir' && $argv 2>&1`;
like($out, qr/unchanged/, 'run again on the same table: the file is left as it was');
open my $bad, '>', "$dir/bad.tsv" or die "$dir/bad.tsv: $!";
print $bad "192.0.2.0\t192.0.2.255\t64496\tZZ\tA\n192.0.2 0\t198.51.100.255\t64497\n";
close $bad;
$out = `'$cli' asn-geo '$dir/bad.tsv' -o '$dir/as.conf' 2>&1`;
is($? >> 8, 1, 'a malformed line: exit 1');
like($out, qr{bad\.tsv:2: "192\.0\.2 0" is not an IPv4 or IPv6 address},
    '... saying which line and what is wrong');
is(do { local (@ARGV, $/) = "$dir/as.conf"; <> }, $geo, '... and the old file is left');

# The recipe, its include where the test's nodes hold it.
(my $http = $recipe) =~ s/^\s*\.\.\.\s*\n//mg;
$http =~ s/\Q$include\E/%%TESTDIR%%\/pow-shield-as.conf/
    or die "the recipe does not include $include\n";
$http =~ s/^(server \{\n)/$1    %%TEST_SERVER%%\n/m
    or die "the recipe has no server { }\n";
my ($limit) = $recipe =~ /pow_shield_limit (\d+) 1m name=as key=\$pow_shield_as;/
    or die "the recipe's AS limit (N 1m name=as key=\$pow_shield_as) not found\n";
my ($own) = $recipe =~ /pow_shield_limit (\d+) 1m;/
    or die "the recipe's per-address limit not found\n";

my $conf = http_conf(<<"EOF", workers => 2);
    pow_shield_secret "as-limits-suite-secret-0123456789abcdef";
    %%REDIS%%

    set_real_ip_from 127.0.0.1;
    real_ip_header X-Real-IP;

$http
EOF

sub get {
    my ($t, $ip) = @_;
    return $t->http_get('/api/data.json', 'X-Real-IP' => $ip)->status // 'none';
}

Test::PowShield::Modes->each_mode($conf, nodes => 2, redis => 'timeout=3s',
    files => { 'pow-shield-as.conf' => $geo, 'html/api/data.json' => "{}\n" }, sub {
    my ($m) = @_;

    # AS64496's addresses, IPv4 and IPv6 (a /64 each: the client key of
    # an IPv6 address), each far under its own limit
    my @as = ((map { "192.0.2.$_" } 1 .. 150), (map { sprintf '2001:db8:%x::1', $_ } 1 .. 150));
    my %count;
    my $i = 0;
    $count{get($m->node(++$i % 2 + 1), $as[$_ % @as])}++ for 0 .. $limit + 9;
    is($count{200}, $limit, "$m: AS64496 is admitted up to its limit of $limit");
    is($count{429}, 10, "$m: ... and challenged past it")
        or diag explain \%count;
    is(get($m->node(1), '192.0.2.254'), 429,
        "$m: an address of the AS it never used is challenged (IPv4)");
    is(get($m->node(2), '2001:db8:ffff::1'), 429,
        "$m: ... and IPv6");

    is(get($m->node(1), '198.51.100.7'), 200, "$m: a client of AS64497 passes");
    is(get($m->node(2), '3fff::7'), 200, "$m: ... IPv6 too");

    # the unrouted range: more requests than the AS limit, all admitted
    my @none = map { "203.0.113.$_" } 1 .. int($limit / $own) + 1;
    my %none;
    for my $ip (@none) {
        $none{get($m->node(++$i % 2 + 1), $ip)}++ for 1 .. $own;
    }
    is_deeply(\%none, { 200 => $own * @none },
        "$m: addresses of no AS are left out of the AS limit: "
        . $own * @none . " requests admitted");
    is(get($m->node(1), $none[0]), 429,
        "$m: ... and still limited per address ($own a minute)");
});

###############################################################################

Test::PowShield::Modes->done_testing;
