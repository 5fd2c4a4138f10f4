#!/usr/bin/perl

# The Rust clients pay ahead (SPEC §4 "Paying ahead", issue 29): the next
# challenge a response carries (X-PoW-Next-Challenge) is solved while the
# response is read and sent with the next request, so a client that pays
# every request makes one round trip per request and never meets a 429.
# Under `pow_shield_limit 1 60s`, 1 free request then 30 paid ones leave 31
# access-log entries: none 429, 30 `solved`. Through
#
#   - the CLI: one `pow-shield get` with 31 URLs; the same with --retry 2;
#     31 sets of one URL joined by --next (one process);
#   - the library's blocking client (objs/pay_loop --blocking);
#   - the reqwest middleware (objs/pay_loop).
#
# Without pay-ahead each paid request is a 429 first, then the request
# again: 61 entries, 30 of them 429.
#
# Pacing (--pace, Policy::pace): under `pow_shield_limit 2 2s`, 5 requests
# wait for the reset instead of paying: 5 entries, all `pass`.
#
# In both modes (Test::PowShield::Modes): local, then cluster (Redis).

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
plan(skip_all => "no $cli or $pay_loop (make build)") unless -x $cli && -x $pay_loop;

my $PAID = 30;
my $N = 1 + $PAID;
my $PACED = 5;

my $t;    # the node of the mode under test (each_mode below)

my $conf = http_conf(<<'EOF');
    %%REDIS%%

    log_format ahead '$http_x_client $status $pow_shield_result';

    server {
        %%TEST_SERVER%%
        access_log %%TESTDIR%%/ahead.log ahead;

        pow_shield_key $http_x_client;

        location /ahead/ {
            pow_shield_limit 1 60s;
            pow_shield_difficulty 12b;
        }

        location /pace/ {
            pow_shield_limit 2 2s;
            pow_shield_difficulty 12b;
        }
    }
EOF

###############################################################################

# run(@argv) -> ($exit_code, $stdout, $stderr)
sub run { $t->run_argv(@_) }

# What the server saw from one client: "<status> <result>" counts, e.g.
# "200 pass x1, 200 solved x30".
sub seen {
    my ($client, $requests) = @_;
    $requests //= $N;
    # nginx logs a request after its answer has gone out: the client may
    # read its last answer before that line is written, so wait (a few
    # seconds at most) until the log holds as many lines as requests sent.
    my $count = sub {
        my %n;
        for (split /\n/, $t->read_file('ahead.log')) {
            $n{$1}++ if /^\Q$client\E (\S+ \S+)$/;
        }
        return \%n;
    };
    my $n = $count->();
    eventually(3, sub {
        $n = $count->();
        my $lines = 0;
        $lines += $_ for values %$n;
        $lines >= $requests;
    });
    return join ', ', map { "$_ x$n->{$_}" } sort keys %$n;
}

# One round trip per request: the free one, then each paid without a 429.
my $PAID_AHEAD = "200 pass x1, 200 solved x$PAID";
my $PACED_LOG = "200 pass x$PACED";

###############################################################################

my %files = (
    'html/ahead/data.json' => qq({"ahead":true}\n),
    'html/pace/data.json' => qq({"pace":true}\n),
);

Test::PowShield::Modes->each_mode($conf, redis => 'timeout=3s', files => \%files, sub {
    my ($m) = @_;
    $t = $m->node(1);

    my $port = $t->port(8080);
    my $url = "http://127.0.0.1:$port/ahead/data.json";
    my $pace_url = "http://127.0.0.1:$port/pace/data.json";

    # The CLI: 31 URLs in one run.
    my ($rc, $out, $err) = run($cli, 'get', '-sS', '-H', 'X-Client: cli-urls',
        ($url) x $N);
    is($rc, 0, "cli: one run with $N URLs exits 0") or diag($err);
    is(seen('cli-urls'), $PAID_AHEAD,
        "cli: $N URLs are $N round trips, $PAID paid ahead, no 429");

    # The same with curl's --retry (each retry would take a solution too).
    ($rc, $out, $err) = run($cli, 'get', '-sS', '--retry', '2',
        '-H', 'X-Client: cli-retry', ($url) x $N);
    is($rc, 0, "cli --retry: exits 0") or diag($err);
    is(seen('cli-retry'), $PAID_AHEAD, "cli --retry: $N round trips, no 429");

    # 31 sets joined by --next, each with options of its own.
    my @sets = map { ('-sS', '-H', 'X-Client: cli-next', $url) } 1 .. $N;
    my @argv = @sets[0 .. 3];
    push @argv, '--next', @sets[4 * $_ .. 4 * $_ + 3] for 1 .. $N - 1;
    ($rc, $out, $err) = run($cli, 'get', @argv);
    is($rc, 0, "cli --next: $N sets in one process exit 0") or diag($err);
    is(seen('cli-next'), $PAID_AHEAD,
        "cli --next: the sets share the solutions paid ahead, no 429");

    # The library: the blocking client, then the reqwest middleware.
    for my $client (['blocking', '--blocking'], ['middleware']) {
        my ($name, @flags) = @$client;
        ($rc, $out, $err) = run($pay_loop, @flags, $url, $N, "X-Client: rust-$name");
        my @got = map { s/^\d+ //r } split /\n/, $out;
        is("@got", join(' ', (200) x $N), "$name: $N requests all end 200")
            or diag("exit $rc; stderr: $err");
        is(seen("rust-$name"), $PAID_AHEAD,
            "$name: $N round trips, $PAID paid ahead, no 429");
    }

    # Pacing: 2 per 2 s, 5 requests wait for the reset instead of paying.
    ($rc, $out, $err) = run($cli, 'get', '-sS', '--pace', '-H', 'X-Client: cli-pace',
        ($pace_url) x $PACED);
    is($rc, 0, 'cli --pace: exits 0') or diag($err);
    is(seen('cli-pace', $PACED), $PACED_LOG, "cli --pace: $PACED requests, none 429 nor solved");

    for my $client (['blocking', '--blocking'], ['middleware']) {
        my ($name, @flags) = @$client;
        ($rc, $out, $err) = run($pay_loop, '--pace', @flags, $pace_url, $PACED,
            "X-Client: pace-$name");
        is($rc, 0, "$name --pace: all end 200") or diag("$out; stderr: $err");
        is(seen("pace-$name", $PACED), $PACED_LOG,
            "$name --pace: $PACED requests, none 429 nor solved");
    }
});

###############################################################################

Test::PowShield::Modes->done_testing;
