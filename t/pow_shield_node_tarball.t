#!/usr/bin/perl

# The Node package as npm ships it: `npm pack` of clients/node carries the
# native addon for linux-x64 glibc (prebuilds/linux-x64-gnu/pow_shield.node,
# built by `make node-native`); installed from the tarball into a fresh
# directory, offline and without axios (an optional peer), the package loads
# that addon, the one inside the installed package, and solves with it.
# Prints its rate beside the CLI's, measured in this run the same way (one
# thread, hashes per CPU second: `pow-shield bench`, the package's
# searchRate), and their ratio; what is asserted is which solver loaded, not
# a speed (the machine may be shared).  Skipped on other platforms, where
# the package runs its WebAssembly search (t/ and clients/node/test cover it).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use File::Temp qw(tempdir);
use Test::More;
use Test::PowShield;

###############################################################################

my $NODE = $ENV{TEST_NODE} || 'node';
plan(skip_all => 'no node (apt-get install nodejs)')
    unless system("$NODE --version >/dev/null 2>&1") == 0;
plan(skip_all => 'no npm') unless system('npm --version >/dev/null 2>&1') == 0;

my $repo = $Test::PowShield::REPO;
my $package = "$repo/clients/node";
my $cli = $ENV{TEST_POW_SHIELD_CLI} // "$repo/objs/pow-shield";
plan(skip_all => "no $cli (make build)") unless -x $cli;

my $tag = qx{$NODE -p 'require(process.argv[1]).platformTag()' '$package/lib/native.js'};
chomp $tag;
plan(skip_all => "the package carries an addon for linux-x64-gnu only, this is $tag: it runs the WebAssembly search")
    unless $tag eq 'linux-x64-gnu';
plan(skip_all => "clients/node/prebuilds/$tag/pow_shield.node is not built (make node-native)")
    unless -f "$package/prebuilds/$tag/pow_shield.node";

my $dir = tempdir('pow-shield-tarball-XXXXXX', TMPDIR => 1, CLEANUP => !$ENV{TEST_NGINX_LEAVE});
local $ENV{npm_config_cache} = "$dir/npm-cache";
local $ENV{NODE_NO_WARNINGS} = 1;
delete local $ENV{POW_SHIELD_SOLVER};

# npm pack, as `make node-pack` runs it
my $out = qx{cd '$package' && npm pack --pack-destination '$dir' --offline --loglevel=error 2>&1};
is($?, 0, 'npm pack of clients/node') or diag($out);
my ($tarball) = glob("$dir/pow-shield-*.tgz");
ok($tarball, 'a tarball') or BAIL_OUT('no tarball');
my @files = split /\n/, scalar qx{tar -tzf '$tarball'};
ok((grep { $_ eq "package/prebuilds/$tag/pow_shield.node" } @files), "the tarball carries prebuilds/$tag/pow_shield.node");

# into a fresh application, offline: no dependency to fetch, axios not installed
mkdir "$dir/app" or die "$dir/app: $!";
open my $fh, '>', "$dir/app/package.json" or die $!;
print $fh qq({"name":"app","version":"1.0.0","private":true}\n);
close $fh;
$out = qx{cd '$dir/app' && npm install --offline --no-audit --no-fund --loglevel=error '$tarball' 2>&1};
is($?, 0, 'npm install of the tarball into a fresh directory, offline') or diag($out);
my $installed = "$dir/app/node_modules/pow-shield";
ok(-d $installed && !-l $installed, 'installed as a copy, not a link to the repository');
ok(!-e "$dir/app/node_modules/axios", 'axios is not installed with it (an optional peer)');

# which solver the installed package runs, from where, and its rate
my $probe = <<'EOF';
const ps = require('pow-shield');
const native = require(require.resolve('pow-shield').replace(/index\.js$/, 'native.js'));
const [seconds] = process.argv.slice(2);
const rate = (engine) => ps.searchRate({ engine, ms: 1000 * Number(seconds) }).perCpuSecond / 1e6;
console.log([ps.engineName(), native.nativeAddon() ? native.NATIVE_PATH : 'none', typeof ps.withPowShieldAxios,
  ps.engineName() === 'native' ? rate('native').toFixed(2) : '0', rate('wasm').toFixed(2)].join(' '));
EOF
open $fh, '>', "$dir/app/probe.js" or die $!;
print $fh $probe;
close $fh;

my $seconds = 2;
my ($best_cli, $best_node, $wasm, $engine, $loaded, $axios) = (0, 0, 0);
# in turn, twice, the best of each: a shared machine's other work moves both alike
for (1 .. 2) {
    my $bench = qx{'$cli' bench --seconds $seconds --no-openssl 2>&1};
    my ($c) = $bench =~ /^\s*1 thread:\s*([0-9.]+) M hashes\/s/m;
    diag("pow-shield bench said:\n$bench") unless defined $c;
    $best_cli = $c if defined $c && $c > $best_cli;
    my $line = qx{cd '$dir/app' && $NODE probe.js $seconds 2>&1};
    chomp $line;
    ($engine, $loaded, $axios, my $n, my $w) = split / /, $line;
    diag("probe.js said: $line") unless defined $w;
    $best_node = $n if defined $n && $n > $best_node;
    $wasm = $w if defined $w && $w > $wasm;
}

is($engine, 'native', 'the installed package solves with the native addon');
is($loaded, "$installed/prebuilds/$tag/pow_shield.node", 'the addon loaded is the one the tarball carried');
is($axios, 'function', 'withPowShieldAxios is there without axios installed');

diag(sprintf 'the packed tarball\'s rate against the CLI\'s (one thread, per CPU second): '
    . 'native %.2f M hashes/s, CLI %.2f M/s: %.2fx (the WebAssembly search: %.2f M/s, %.2fx)',
    $best_node, $best_cli, $best_cli ? $best_node / $best_cli : 0, $wasm, $best_cli ? $wasm / $best_cli : 0);

done_testing;
