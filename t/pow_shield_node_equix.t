#!/usr/bin/perl

# The Node client and pow_shield_work equix (docs/equix.md): powFetch pays
# 10 requests over the limit of an Equi-X location, each with a nonce and
# its Equi-X solution, paid ahead (no 429), with the native addon (make
# node-native) and with the WebAssembly solver (lib/equix.wasm,
# POW_SHIELD_SOLVER=wasm); with neither (POW_SHIELD_SOLVER=js), the request
# rejects with an UnsolvableError naming equix, before any search.
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

my $NODE = $ENV{TEST_NODE} || 'node';
plan(skip_all => 'no node (apt-get install nodejs)')
    unless system("$NODE --version >/dev/null 2>&1") == 0;

my $REPO = $Test::PowShield::REPO;
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

my $script = <<"EOF";
const p = require('$REPO/clients/node');
const [url, client, count] = process.argv.slice(1);
(async () => {
  const info = p.equixInfo();
  console.log(info ? `equix \${info.engine} \${info.runtime} \${info.memory}` : 'no equix');
  const fetch = p.withPowShield(globalThis.fetch);
  for (let i = 0; i < Number(count); i++) {
    try {
      const r = await fetch(url, { headers: { 'X-Client': client } });
      await r.text();
      console.log(r.status);
    } catch (e) {
      console.log('raised', e.name, e.message);
    }
  }
})();
EOF

sub node {
    my ($solver, @argv) = @_;
    local $ENV{POW_SHIELD_SOLVER} = $solver if defined $solver;
    open(my $fh, '-|', $NODE, '-e', $script, @argv) or die "cannot run $NODE: $!";
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

    for my $case (['native', undef, qr/^equix native (compiled|interpreted) \d+$/m],
        ['wasm', 'wasm', qr/^equix wasm interpreted \d+$/m])
    {
        my ($name, $solver, $info) = @$case;
        SKIP: {
            my $got = node($solver, $url, "node-$name", 1 + $PAID);
            skip("no $name Equi-X solver (make node-native, make node-wasm)", 3)
                if $got =~ /^no equix/m;
            like($got, $info, "$mode: $name: the Equi-X solver says how it runs");
            my @statuses = grep { /^\d+$/ } split /\n/, $got;
            is("@statuses", join(' ', (200) x (1 + $PAID)), "$mode: $name: every request ends 200")
                or diag($got);
            is(seen("node-$name"), "200 pass x1, 200 solved x$PAID",
                "$mode: $name: $PAID paid in Equi-X, ahead of need (no 429)");
        }
    }

    my $got = node('js', $url, 'node-none', 2);
    like($got, qr/^no equix$/m, "$mode: POW_SHIELD_SOLVER=js: no Equi-X solver");
    like($got, qr/^raised UnsolvableError the server asks for equix proof of work/m,
        "$mode: over the limit, UnsolvableError naming equix, not a search");
});

###############################################################################

Test::PowShield::Modes->done_testing;
