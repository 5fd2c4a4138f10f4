#!/usr/bin/perl

# The clients never have more than n - 1 requests in flight over the limit
# (SPEC §5, issue 26 point 5): each keeps a per-origin gate that starts at
# 4 in flight (n - 1 for the default pow_shield_strikes 5 60s), before the
# first response too, and opens only as far as RateLimit's Remaining shows
# room. So a caller's gather of 10 or 50 requests over the limit ends all
# 200 (each 429 paid), never Blocked, through every client:
#
#   - Python: httpx.AsyncClient(auth=HttpxAuth()) with asyncio.gather, and
#     one pow_shield.Session from 10 or 50 threads;
#   - Node: Promise.all through powFetch and through withPowShield(fetch);
#   - Rust: the reqwest middleware (objs/pay_loop --at-once: a JoinSet of
#     requests through one client);
#   - the CLI: one `pow-shield get -Z` run with 10 or 50 URLs.
#
# The Rust ones pay ahead (SPEC §4): a request that starts while a
# solution of an earlier response's next challenge is held sends it and
# meets no 429, so they see fewer 429s, each paid request still paid once.
#
# Without the gate all of them are sent at once: the server answers each
# with a 429 (one strike each) before any is paid, the 6th unpaid strike
# blocks (e.g. httpx: [200, Blocked x 9]).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Test::PowShield qw(:pow http_conf);

###############################################################################

my $REPO = $Test::PowShield::REPO;
my $PY = $ENV{TEST_PYTHON} || '/usr/bin/python3';
my $NODE = $ENV{TEST_NODE} || 'node';
my $cli = $ENV{TEST_POW_SHIELD_CLI} // "$REPO/objs/pow-shield";
my $pay_loop = $ENV{TEST_POW_SHIELD_PAY_LOOP} // "$REPO/objs/pay_loop";

my $t = Test::PowShield->new;

$t->write_file_expand('nginx.conf', http_conf(<<'EOF'));
    log_format gate '$http_x_client $status $pow_shield_result';

    server {
        %%TEST_SERVER%%
        access_log %%TESTDIR%%/gate.log gate;

        pow_shield_key $http_x_client;

        # the default breaker: pow_shield_strikes 5 60s
        location /gate/ {
            pow_shield_limit 2 1h;
            pow_shield_difficulty 1;
            # the 429 path (t/pow_shield_*_pay_ahead.t test paying ahead)
            pow_shield_pay_ahead off;
        }
    }
EOF

$t->write_file('html/gate/data.json', qq({"gate":true}\n));

$t->run;

###############################################################################

my $dir = $t->testdir;
my $url = 'http://127.0.0.1:' . $t->port(8080) . '/gate/data.json';

# run(@argv) -> ($exit_code, $stdout, $stderr)
sub run { $t->run_argv(@_) }

# What the server answered one client: "status result" counts, e.g.
# "200 pass x2, 200 solved x8, 429 challenge x8".
sub seen {
    my ($client) = @_;
    my %n;
    for (split /\n/, $t->read_file('gate.log')) {
        $n{$1}++ if /^\Q$client\E (\S+ \S+)/;
    }
    return join ', ', map { "$_ x$n{$_}" } sort keys %n;
}

# The server's side of a client that paid its way through COUNT requests.
sub paid_log {
    my ($count) = @_;
    return "200 pass x2, 200 solved x" . ($count - 2) . ", 429 challenge x" . ($count - 2);
}

# One client's gather: its outcomes (one line each, "200" or the error's
# name) and what the server saw.
sub check {
    my ($name, $count, $out, $err) = @_;
    my @got = grep { length } split /\n/, $out;
    is(join(' ', @got), join(' ', ('200') x $count),
        "$name: a gather of $count over the limit ends all 200")
        or diag($err);
    is(seen("$name-$count"), paid_log($count),
        "$name: $count: each 429 paid, none blocked");
}

# check() for a client that pays ahead (SPEC §4): a request that starts
# while a solution ahead is held pays with it and meets no 429; how many do
# depends on how the gather interleaves, so the 429s are counted only as
# at most one per paid request.
sub check_ahead {
    my ($name, $count, $out, $err) = @_;
    my @got = grep { length } split /\n/, $out;
    is(join(' ', @got), join(' ', ('200') x $count),
        "$name: a gather of $count over the limit ends all 200")
        or diag($err);
    my $seen = seen("$name-$count");
    my $challenged = $seen =~ s/, 429 challenge x(\d+)$// ? $1 : 0;
    is($seen, "200 pass x2, 200 solved x" . ($count - 2),
        "$name: $count: each paid once, none blocked");
    cmp_ok($challenged, '<=', $count - 2, "$name: $count: at most one 429 per paid request");
}

my $has_py = -x $PY;
my %py = map { $_ => $has_py && system($PY, '-c', "import $_") == 0 } qw(requests httpx);
$ENV{PYTHONPATH} = "$REPO/clients/python";

$t->write_file('gather.py', <<'EOF');
# gather.py KIND URL CLIENT COUNT: COUNT GETs at once through one client;
# prints each one's status, or the name of the error it raised.
import asyncio, sys, threading
import pow_shield

kind, url, client, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
headers = {"X-Client": client}
results = [None] * count

def outcome(call):
    try:
        return str(call().status_code)
    except pow_shield.PowShieldError as e:
        return type(e).__name__

if kind == "httpx-async":
    import httpx
    async def main():
        async with httpx.AsyncClient(auth=pow_shield.HttpxAuth(), timeout=30) as c:
            async def one():
                try:
                    return str((await c.get(url, headers=headers)).status_code)
                except pow_shield.PowShieldError as e:
                    return type(e).__name__
            return await asyncio.gather(*(one() for _ in range(count)))
    results = asyncio.run(main())
else:
    if kind == "session":
        s = pow_shield.Session()
        get = lambda: s.get(url, headers=headers, timeout=30)
    elif kind == "requests-auth":
        import requests
        auth = pow_shield.RequestsAuth()
        get = lambda: requests.get(url, headers=headers, timeout=30, auth=auth)
    elif kind == "httpx":
        import httpx
        c = httpx.Client(auth=pow_shield.HttpxAuth(), timeout=30)
        get = lambda: c.get(url, headers=headers)
    def worker(i):
        results[i] = outcome(get)
    threads = [threading.Thread(target=worker, args=(i,)) for i in range(count)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
print("\n".join(results))
EOF

$t->write_file('gather.js', <<'EOF');
// gather.js KIND URL CLIENT COUNT: COUNT fetches at once (Promise.all);
// prints each one's status, or the name of the error it raised.
const { powFetch, withPowShield } = require(process.env.POW_SHIELD_NODE);
const [kind, url, client, count] = process.argv.slice(2);
const pay = kind === 'powFetch' ? powFetch : withPowShield(fetch);
const one = () => pay(url, { headers: { 'X-Client': client } })
  .then(async (r) => { await r.arrayBuffer(); return String(r.status); }, (e) => e.name);
Promise.all(Array.from({ length: Number(count) }, one))
  .then((all) => console.log(all.join('\n')));
EOF
$ENV{POW_SHIELD_NODE} = "$REPO/clients/node";

my $has_node = system("$NODE --version >/dev/null 2>&1") == 0;

for my $count (10, 50) {
    for my $kind (qw(httpx-async httpx session requests-auth)) {
        SKIP: {
            my $lib = $kind =~ /^httpx/ ? 'httpx' : 'requests';
            skip("python $lib not installed", 2) unless $py{$lib};
            check("py-$kind", $count,
                (run($PY, "$dir/gather.py", $kind, $url, "py-$kind-$count", $count))[1, 2]);
        }
    }

    for my $kind (qw(powFetch withPowShield)) {
        SKIP: {
            skip('no node', 2) unless $has_node;
            check("node-$kind", $count,
                (run($NODE, "$dir/gather.js", $kind, $url, "node-$kind-$count", $count))[1, 2]);
        }
    }

    SKIP: {
        skip("no $pay_loop (make build)", 3) unless -x $pay_loop;
        my ($rc, $out, $err) = run($pay_loop, '--at-once', $url, $count, "X-Client: rust-$count");
        $out =~ s/^\d+ //mg;
        check_ahead('rust', $count, $out, $err);
    }

    SKIP: {
        skip("no $cli (make build)", 4) unless -x $cli;
        my ($rc, $out, $err) = run($cli, 'get', '-Z', '-s', '-S', '-H', "X-Client: cli-$count",
            '-w', '%{http_code}\n', ($url) x $count);
        is($rc, 0, "cli: -Z with $count URLs: exit 0") or diag($err);
        $out =~ s/^\{"gate":true\}\n//mg;
        check_ahead('cli', $count, $out, $err);
    }
}

done_testing;
