#!/usr/bin/perl

# The Python client and pow_shield_work equix (docs/equix.md): installed
# with its native module (`pip install ./clients/python` where cargo is),
# pow_shield.Session pays 10 requests over the limit of an Equi-X location,
# each with a nonce and its Equi-X solution, paid ahead (no 429); installed
# without it (POW_SHIELD_NO_NATIVE=1), the same request raises Unsolvable
# naming equix, before any search.
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
use File::Temp ();

###############################################################################

my $PY = $ENV{TEST_PYTHON} || '/usr/bin/python3';
plan(skip_all => "$PY not found (apt-get install python3)") unless -x $PY;
plan(skip_all => 'no setuptools-rust (apt-get install python3-setuptools-rust)')
    unless system("'$PY' -c 'import setuptools_rust' 2>/dev/null") == 0;
plan(skip_all => 'no requests (apt-get install python3-requests)')
    unless system("'$PY' -c 'import requests' 2>/dev/null") == 0;
plan(skip_all => 'no cargo') unless system('cargo --version >/dev/null 2>&1') == 0;

my $PAID = 10;

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
    }
EOF

my %files = ('html/equix/data.json' => qq({"dir":"equix"}\n));

###############################################################################

my $src = "$Test::PowShield::REPO/clients/python";
my $sites = File::Temp::tempdir('pow-shield-py-equix-XXXXXX', TMPDIR => 1, CLEANUP => 1);

sub install {
    my ($site, %env) = @_;
    local @ENV{keys %env} = values %env;
    my $out = qx{'$PY' -m pip install --quiet --no-build-isolation --no-deps --no-index --target '$site' '$src' 2>&1};
    return ($? >> 8, $out);
}

my ($rc, $out) = install("$sites/native");
is($rc, 0, 'pip install with the native module') or diag($out);
($rc, $out) = install("$sites/pure", POW_SHIELD_NO_NATIVE => 1);
is($rc, 0, 'pip install without it') or diag($out);

my $script = <<'EOF';
import sys, pow_shield
url, client, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
try:
    info = pow_shield.equix_info()
    print("equix", info["runtime"], info["memory"])
except pow_shield.Unsolvable as e:
    print("no equix:", e)
with pow_shield.Session() as s:
    for _ in range(count):
        try:
            print(s.get(url, headers={"X-Client": client}, timeout=30).status_code)
        except pow_shield.Unsolvable as e:
            print("raised", type(e).__name__, e)
EOF

sub python {
    my ($site, @argv) = @_;
    local $ENV{PYTHONPATH} = "$sites/$site";
    open(my $fh, '-|', $PY, '-c', $script, @argv) or die "cannot run $PY: $!";
    my $got = do { local $/; <$fh> } // '';
    close $fh;
    return $got;
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
    my $url = 'http://127.0.0.1:' . $t->port(8080) . '/equix/data.json';

    my $got = python('native', $url, 'py-native', 1 + $PAID);
    like($got, qr/^equix (compiled|interpreted) \d+$/m, "$mode: the native module solves Equi-X");
    my @statuses = grep { /^\d+$/ } split /\n/, $got;
    is("@statuses", join(' ', (200) x (1 + $PAID)), "$mode: Session: every request ends 200")
        or diag($got);
    is(seen('py-native'), "200 pass x1, 200 solved x$PAID",
        "$mode: $PAID paid in Equi-X, ahead of need (no 429)");

    $got = python('pure', $url, 'py-pure', 2);
    like($got, qr/^no equix: .*equix/m, "$mode: without the native module, no Equi-X");
    like($got, qr/^raised Unsolvable .*equix proof of work.*native module/m,
        "$mode: over the limit, Unsolvable naming equix, not a search");
});

###############################################################################

Test::PowShield::Modes->done_testing;
