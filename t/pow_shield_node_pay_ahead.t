#!/usr/bin/perl

# The Node.js client pays ahead (SPEC 4 "Paying ahead", docs/protocol.md 6)
# against the module, counted in the access log: with one free request a
# minute, 1 + 30 requests of withPowShield (and of powFetch) are 31 round
# trips, none a 429, 30 of them solved; with pow_shield_pay_ahead off the
# same requests take the 429 path (61 round trips); three requests in flight
# at a time pay through 429s in their first round only; and with `pace`
# (2 requests per 2 s) the requests beyond the limit wait for the reset:
# none is a 429 and none is solved.  Local mode and cluster mode.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Test::PowShield qw(:pow http_conf);
use Test::PowShield::Modes;

###############################################################################

my $NODE = $ENV{TEST_NODE} || 'node';
plan(skip_all => 'no node (apt-get install nodejs)')
    unless system("$NODE --version >/dev/null 2>&1") == 0;

my $conf = http_conf(<<'EOF');
    %%REDIS%%
    log_format ahead '$http_x_client $status $pow_shield_result';

    server {
        %%TEST_SERVER%%
        access_log %%TESTDIR%%/ahead.log ahead;

        pow_shield_key $http_x_client;

        location /paid/ {
            pow_shield_limit 1 60s;
            pow_shield_difficulty 12b;
        }

        location /off/ {
            pow_shield_limit 1 60s;
            pow_shield_difficulty 12b;
            pow_shield_pay_ahead off;
        }

        location /paced/ {
            pow_shield_limit 2 2s;
            pow_shield_difficulty 12b;
        }
    }
EOF

# node client.js <url> <client> <requests> <in flight> <how> [options JSON]:
# the requests in rounds of <in flight>, through withPowShield(fetch) or
# powFetch; prints the statuses.
my $client = <<'EOF';
const { withPowShield, powFetch } = require(process.env.POW_SHIELD_NODE);
const [url, who, total, inFlight, how, opts = '{}'] = process.argv.slice(2);
const options = JSON.parse(opts);
const f = how === 'powFetch'
  ? (u, init) => powFetch(u, { ...init, powShield: options })
  : withPowShield(fetch, options);
(async () => {
  const statuses = [];
  for (let sent = 0; sent < Number(total);) {
    const round = Math.min(Number(inFlight), Number(total) - sent);
    const rs = await Promise.all(Array.from({ length: round }, async () => {
      const r = await f(url, { headers: { 'X-Client': who } });
      await r.arrayBuffer();
      return r.status;
    }));
    statuses.push(...rs);
    sent += round;
  }
  console.log(statuses.join(' '));
})().catch((e) => { console.log(`error ${e}`); process.exitCode = 1; });
EOF

my @dirs = qw(paid off paced);

Test::PowShield::Modes->each_mode($conf, redis => 'timeout=3s',
    files => { 'client.js' => $client, map { ("html/$_/data.json" => qq({"dir":"$_"}\n)) } @dirs }, sub {
    my ($mode) = @_;
    my $t = $mode->node(1);
    my $dir = $t->testdir;
    my $base = 'http://127.0.0.1:' . $t->port(8080);
    local $ENV{POW_SHIELD_NODE} = "$Test::PowShield::REPO/clients/node";
    local $ENV{NODE_NO_WARNINGS} = 1;

    my $run = sub {
        my ($path, $who, $total, $in_flight, $how, $opts) = @_;
        my $cmd = "$NODE '$dir/client.js' '$base$path' '$who' $total $in_flight $how";
        $cmd .= " '$opts'" if defined $opts;
        my $out = qx{$cmd 2>&1};
        chomp $out;
        return $out;
    };
    my $all_200 = sub { join ' ', (200) x $_[0] };

    is($run->('/paid/data.json', 'with', 31, 1, 'withPowShield'), $all_200->(31),
        'withPowShield: 1 + 30 requests, every answer a 200');
    is($run->('/paid/data.json', 'global', 31, 1, 'powFetch'), $all_200->(31),
        'powFetch: 1 + 30 requests, every answer a 200');
    is($run->('/off/data.json', 'off', 31, 1, 'withPowShield'), $all_200->(31),
        'pay_ahead off: 1 + 30 requests, every answer a 200');
    is($run->('/paid/data.json', 'three', 30, 3, 'withPowShield'), $all_200->(30),
        'three in flight: 30 requests, every answer a 200');
    is($run->('/paced/data.json', 'paced', 6, 1, 'withPowShield', '{"pace":true}'), $all_200->(6),
        'pace: 6 requests at 2 per 2 s, every answer a 200');

    # what the server saw: one line per round trip
    my @log = split /\n/, $t->read_file('ahead.log');
    my $of = sub {
        my ($who) = @_;
        my @lines = grep { /^\Q$who\E / } @log;
        my %n;
        $n{ (split / /)[1] . ' ' . (split / /)[2] }++ for @lines;
        return (scalar @lines, \%n);
    };

    for my $who (qw(with global)) {
        my ($trips, $n) = $of->($who);
        is($trips, 31, "$who: 31 round trips for 31 requests");
        is_deeply($n, { '200 pass' => 1, '200 solved' => 30 },
            "$who: the first passes, 30 are solved ahead, no 429");
    }

    my ($off, $n_off) = $of->('off');
    is($off, 61, 'pay_ahead off: 61 round trips (the 429 path: a 429, then the paid request)');
    is_deeply($n_off, { '200 pass' => 1, '429 challenge' => 30, '200 solved' => 30 },
        'pay_ahead off: 30 429s, 30 solved');

    my ($three, $n_three) = $of->('three');
    is($three, 32, 'three in flight: 32 round trips for 30 requests');
    is_deeply($n_three, { '200 pass' => 1, '429 challenge' => 2, '200 solved' => 29 },
        'three in flight: a 429 only for the two sent beside the first, then one solution each');

    my ($paced, $n_paced) = $of->('paced');
    is($paced, 6, 'pace: 6 round trips for 6 requests');
    is_deeply($n_paced, { '200 pass' => 6 }, 'pace: waited for the reset: no 429, nothing solved');
});

done_testing;
