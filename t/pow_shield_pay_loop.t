#!/usr/bin/perl

# Paying clients are never blocked (SPEC §5, issue 15 part 1): spending a
# valid solution takes back the strike its 429 gave, so under the default
# breaker (pow_shield_strikes 5 60s) a client that pays every challenge in
# a row is never blocked. Each of the three clients, against the module:
# 2 free requests, then 20 over the limit, each one challenged and paid:
#
#   - the CLI (objs/pow-shield get, TEST_POW_SHIELD_CLI): 22 runs, all exit 0;
#   - the Python client (pow_shield.Session, clients/python): 22 requests,
#     all 200;
#   - the Rust reqwest middleware (objs/pay_loop, the example
#     client/examples/pay_loop.rs, TEST_POW_SHIELD_PAY_LOOP): 22 requests,
#     all 200.
#
# Without the take-back, each paid request leaves one strike: the 5th
# challenge brings them to 5, the resend that pays it is blocked (403,
# X-PoW-Shield: blocked; exit 90 / Blocked), and so is every request after.
#
# In both modes (Test::PowShield::Modes): the strikes in the zone, then in
# Redis.

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
my $PY = $ENV{TEST_PYTHON} || '/usr/bin/python3';

my $FREE = 2;
my $PAID = 20;
my $N = $FREE + $PAID;

my $t;    # the node of the mode under test (each_mode below)

my $conf = http_conf(<<'EOF');
    %%REDIS%%

    log_format pay '$http_x_client $status $pow_shield_result $pow_shield_strikes';

    server {
        %%TEST_SERVER%%
        access_log %%TESTDIR%%/pay.log pay;

        pow_shield_key $http_x_client;

        # the default breaker: pow_shield_strikes 5 60s
        location /pay/ {
            pow_shield_limit 2 1h;
            pow_shield_difficulty 1;
            # the 429 path (t/pow_shield_*_pay_ahead.t test paying ahead)
            pow_shield_pay_ahead off;
        }
    }
EOF

###############################################################################

# run(@argv) -> ($exit_code, $stdout, $stderr)
sub run { $t->run_argv(@_) }

# What the server saw from one client: "status result" per request.
sub seen {
    my ($client) = @_;
    return join ', ', map { /^\Q$client\E (\S+ \S+)/ ? $1 : () }
        split /\n/, $t->read_file('pay.log');
}

# The strikes the server reported with each of the client's requests
# ($pow_shield_strikes), for a failure's diag.
sub strikes {
    my ($client) = @_;
    return join ' ', map { /^\Q$client\E \S+ \S+ (\S+)/ ? $1 : () }
        split /\n/, $t->read_file('pay.log');
}

# "1 200, 2 200, ...": each request's outcome, numbered.
sub numbered { my $i = 0; join ', ', map { ++$i . " $_" } @_ }

###############################################################################

my %files = ('html/pay/data.json' => qq({"paid":true}\n));

Test::PowShield::Modes->each_mode($conf, redis => 'timeout=3s', files => \%files, sub {
    my ($m) = @_;
    $t = $m->node(1);

    my $url = 'http://127.0.0.1:' . $t->port(8080) . '/pay/data.json';

    # What paying every challenge looks like from the server.
    my $PAID_LOG = join ', ', ('200 pass') x $FREE, ('429 challenge, 200 solved') x $PAID;

    # The CLI: 22 runs of `pow-shield get`

    SKIP: {
        skip "no $cli (make build)", 2 unless -x $cli;

        my (@codes, $first_err);
        for my $i (1 .. $N) {
            my ($rc, $out, $err) = run($cli, 'get', '-H', 'X-Client: cli', $url);
            push @codes, $rc;
            $first_err //= "run $i: exit $rc: $err" if $rc != 0;
        }
        is(numbered(@codes), numbered((0) x $N),
            "cli: $FREE free + $PAID paid runs of pow-shield get all exit 0")
            or diag($first_err);
        is(seen('cli'), $PAID_LOG, "cli: the server saw $PAID challenges, each paid")
            or diag("strikes with each request: " . strikes('cli'));
    }

    # Python: pow_shield.Session, 22 requests

    SKIP: {
        skip "$PY not found", 2 unless -x $PY;
        skip 'python requests not installed (apt-get install python3-requests)', 2
            unless system($PY, '-c', 'import requests') == 0;

        $t->write_file('session.py', <<'EOF');
# session.py URL COUNT: COUNT GETs in a row through one pow_shield.Session;
# prints each one's status, or "raised <error>".
import sys
import pow_shield

url, count = sys.argv[1], int(sys.argv[2])
with pow_shield.Session() as s:
    for i in range(count):
        try:
            r = s.get(url, headers={"X-Client": "python"}, timeout=10)
            print(r.status_code)
        except pow_shield.PowShieldError as e:
            print("raised", type(e).__name__, getattr(e.response, "status_code", "-"))
EOF
        local $ENV{PYTHONPATH} = "$REPO/clients/python";
        my ($rc, $out, $err) = run($PY, $t->path('session.py'), $url, $N);
        my @got = split /\n/, $out;
        is(numbered(@got), numbered((200) x $N),
            "python: $FREE free + $PAID paid requests through Session all end 200")
            or diag("exit $rc; stderr: " . ($err eq '' ? '(empty)' : $err));
        is(seen('python'), $PAID_LOG, "python: the server saw $PAID challenges, each paid")
            or diag("strikes with each request: " . strikes('python'));
    }

    # Rust: the reqwest middleware (client/examples/pay_loop.rs), 22 requests

    SKIP: {
        skip "no $pay_loop (make build)", 2 unless -x $pay_loop;

        # Not paying ahead (t/pow_shield_cli_pay_ahead.t does): every paid
        # request here meets its 429, and its strike is taken back.
        my ($rc, $out, $err) = run($pay_loop, '--no-pay-ahead', $url, $N, 'X-Client: rust');
        my @got = map { s/^\d+ //r } split /\n/, $out;
        is(numbered(@got), numbered((200) x $N),
            "rust: $FREE free + $PAID paid requests through the middleware all end 200")
            or diag("exit $rc; stderr: " . ($err eq '' ? '(empty)' : $err));
        is(seen('rust'), $PAID_LOG, "rust: the server saw $PAID challenges, each paid")
            or diag("strikes with each request: " . strikes('rust'));
    }
});

###############################################################################

Test::PowShield::Modes->done_testing;
