#!/usr/bin/perl

# axios with withPowShieldAxios (clients/node) against the module, counted
# in the access log: over a limit of 5 requests a minute, 35 requests one by
# one are 35 round trips (5 pass, 30 solved ahead, no 429); 35 gathered with
# Promise.all are all 200 too, never blocked, the 429s only for the few
# sent beside the first before the first next challenge came (at most
# inFlight - 1 = 3), every other paid request one round trip; with `pace`
# (2 requests per 2 s) the requests beyond the limit wait for the reset; and
# a blocked client's request rejects with BlockedError, carrying the axios
# response, and is not sent again.  Local mode and cluster mode.  Prints
# the milliseconds per paid request (one by one: each request from the
# call to its data; gathered: the whole Promise.all over the 30 paid).
#
# axios is the Node package's optional peer, installed into clients/node
# by `make node-dev` (npm ci); skipped without it.

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

my $package = "$Test::PowShield::REPO/clients/node";
plan(skip_all => 'axios is not installed in clients/node (make node-dev: npm ci)')
    unless system($NODE, '-e', 'require.resolve("axios", { paths: [process.argv[1]] })', $package) == 0;

my $conf = http_conf(<<'EOF');
    %%REDIS%%
    log_format axios '$http_x_client $status $pow_shield_result';

    server {
        %%TEST_SERVER%%
        access_log %%TESTDIR%%/axios.log axios;

        pow_shield_key $http_x_client;

        location /api/ {
            pow_shield_limit 5 60s;
            pow_shield_difficulty 16b;
        }

        location /paced/ {
            pow_shield_limit 2 2s;
            pow_shield_difficulty 16b;
        }

        location /red/ {
            pow_shield_limit 1 60s;
            pow_shield_difficulty 16b;
            pow_shield_strikes 2 60s;
        }
    }
EOF

# node client.js <url> <client> <requests> one|all [options JSON]: the
# requests through withPowShieldAxios(axios.create()), one by one or all
# in one Promise.all; prints the statuses, then "ms <per paid request>
# <solver>". A rejection prints "error <its class> <BlockedError?> <status>
# <data>".
my $client = <<'EOF';
const pkg = process.env.POW_SHIELD_NODE;
const axios = require(require.resolve('axios', { paths: [pkg] }));
const { withPowShieldAxios, BlockedError, engineName } = require(pkg);
const [url, who, total, how, opts = '{}'] = process.argv.slice(2);
const api = withPowShieldAxios(axios.create({ headers: { 'X-Client': who } }), JSON.parse(opts));
const n = Number(total);
const FREE = 5;
(async () => {
  const statuses = [];
  let paidMs = 0;
  if (how === 'all') {
    const t = process.hrtime.bigint();
    const rs = await Promise.all(Array.from({ length: n }, () => api.get(url)));
    paidMs = Number(process.hrtime.bigint() - t) / 1e6;
    statuses.push(...rs.map((r) => r.status));
  } else {
    for (let i = 0; i < n; i++) {
      const t = process.hrtime.bigint();
      const r = await api.get(url);
      if (i >= FREE) paidMs += Number(process.hrtime.bigint() - t) / 1e6;
      statuses.push(r.status);
    }
  }
  console.log(statuses.join(' '));
  console.log(`ms ${n > FREE ? (paidMs / (n - FREE)).toFixed(2) : 0} ${engineName()}`);
})().catch((e) => {
  const r = e.response || {};
  console.log(`error ${e.constructor.name} ${e instanceof BlockedError} ${r.status} ${JSON.stringify(r.data)}`);
});
EOF

Test::PowShield::Modes->each_mode($conf,
    files => { 'client.js' => $client, map { ("html/$_/data.json" => qq({"dir":"$_"}\n)) } qw(api paced red) }, sub {
    my ($mode) = @_;
    my $t = $mode->node(1);
    my $dir = $t->testdir;
    my $base = 'http://127.0.0.1:' . $t->port(8080);
    local $ENV{POW_SHIELD_NODE} = $package;
    local $ENV{NODE_NO_WARNINGS} = 1;

    # (statuses, ms per paid request, solver)
    my $run = sub {
        my ($path, $who, $total, $how, $opts) = @_;
        my $cmd = "$NODE '$dir/client.js' '$base$path' '$who' $total $how";
        $cmd .= " '$opts'" if defined $opts;
        my @out = split /\n/, scalar qx{$cmd 2>&1};
        my ($ms, $solver) = ($out[1] // '') =~ /^ms (\S+) (\S+)$/;
        return ($out[0] // '', $ms, $solver);
    };
    my $all_200 = sub { join ' ', (200) x $_[0] };

    # what the server saw of a client: (round trips, { "<status> <result>" => count })
    my $seen = sub {
        my ($who) = @_;
        my @lines = grep { /^\Q$who\E / } split /\n/, $t->read_file('axios.log');
        my %n;
        $n{ join ' ', (split / /)[1, 2] }++ for @lines;
        return (scalar @lines, \%n);
    };

    my ($one, $one_ms, $solver) = $run->('/api/data.json', 'one', 35, 'one');
    is($one, $all_200->(35), 'one by one: 35 requests over a limit of 5, every answer a 200');
    my ($trips, $n) = $seen->('one');
    is($trips, 35, 'one by one: 35 round trips for 35 requests');
    is_deeply($n, { '200 pass' => 5, '200 solved' => 30 }, 'one by one: 5 pass, 30 solved ahead, no 429');

    my ($all, $all_ms) = $run->('/api/data.json', 'all', 35, 'all');
    is($all, $all_200->(35), 'gathered (Promise.all): 35 requests, every answer a 200');
    my ($all_trips, $m) = $seen->('all');
    my $c429 = $m->{'429 challenge'} // 0;
    ok($c429 <= 3, "gathered: $c429 429s, only for requests sent beside the first ones (at most 3)");
    is_deeply($m, { '200 pass' => 5, '200 solved' => 30, ($c429 ? ('429 challenge' => $c429) : ()) },
        'gathered: 5 pass, 30 solved, no 403');
    is($all_trips, 35 + $c429, 'gathered: one round trip per request beyond those 429s');

    diag(sprintf '%s: axios (%s solver), 16 bits: one by one %d round trips for 35, %s ms per paid request; '
        . 'gathered %d round trips for 35, %s ms per paid request', $mode->name, $solver // '?', $trips,
        $one_ms // '?', $all_trips, $all_ms // '?');

    my ($paced) = $run->('/paced/data.json', 'paced', 6, 'one', '{"pace":true}');
    is($paced, $all_200->(6), 'pace: 6 requests at 2 per 2 s, every answer a 200');
    my ($paced_trips, $p) = $seen->('paced');
    is_deeply([$paced_trips, $p], [6, { '200 pass' => 6 }], 'pace: 6 round trips, waited for the reset: no 429, nothing solved');

    # blocked: two unpaid 429s (the strikes) by hand, then axios
    $t->http_get('/red/data.json', 'X-Client' => 'red') for 1 .. 3;
    my ($blocked) = $run->('/red/data.json', 'red', 1, 'one');
    is($blocked, 'error BlockedError true 403 "Blocked by Circuit Breaker"',
        'blocked: the request rejects with BlockedError, its response the axios response (403, its body)')
        or diag($t->read_file('axios.log'));
    my @red = map { join ' ', (split / /)[1, 2] } grep { /^red / } split /\n/, $t->read_file('axios.log');
    is_deeply(\@red, ['200 pass', '429 challenge', '429 challenge', '403 blocked'], 'blocked: axios sent it once, no retry');
});

done_testing;
