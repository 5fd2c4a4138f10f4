#!/usr/bin/perl

# The Python client with its native solver never aborts at exit (issue 39):
# a solve ahead still running in its daemon thread when the program ends
# was inside the native search with the GIL released, and taking the GIL
# back during finalization killed the thread in the middle of Rust code
# (SIGABRT, exit 134). The README's "Paying ahead" example runs 20 times as
# written, 7 `requests.get(url, auth=pow_shield.RequestsAuth())` 10 times,
# against the shield, and a program ending while a daemon thread solves a
# challenge of months 5 times: every run exits 0, with nothing on stderr.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Test::PowShield qw(:pow :util);
use Test::PowShield::Examples qw(readme_blocks);

###############################################################################

my $REPO = $Test::PowShield::REPO;
my $PY = $ENV{TEST_PYTHON} || '/usr/bin/python3';
plan(skip_all => "$PY not found (apt-get install python3)") unless -x $PY;
plan(skip_all => 'no setuptools-rust (apt-get install python3-setuptools-rust)')
    unless system("'$PY' -c 'import setuptools_rust' 2>/dev/null") == 0;
plan(skip_all => 'no requests (apt-get install python3-requests)')
    unless system("'$PY' -c 'import requests' 2>/dev/null") == 0;
plan(skip_all => 'no cargo') unless system('cargo --version >/dev/null 2>&1') == 0;

my $t = Test::PowShield->new;

# api.example.com of the README, keyed by address; every answer over the
# limit sends the next challenge, solved ahead in a thread
$t->write_file_expand('nginx.conf', http_conf(<<'EOF'));
    server {
        %%TEST_SERVER%%
        pow_shield_strikes off;

        location /items {
            pow_shield_limit 1 1h;
            pow_shield_difficulty 12b;
            try_files /data.json =404;
        }
    }
EOF
$t->write_file('html/data.json', qq({"items":[]}\n));
$t->run;

###############################################################################

my $dir = $t->testdir;
my $base = 'http://127.0.0.1:' . $t->port(8080);

# the client with its native solver, installed as a user would
my $out = qx{'$PY' -m pip install --quiet --no-build-isolation --no-deps --no-index --target '$dir/site' '$REPO/clients/python' 2>&1};
is($? >> 8, 0, 'pip install ./clients/python builds the native solver') or diag($out);
local $ENV{PYTHONPATH} = "$dir/site";
is(scalar qx{'$PY' -c 'import pow_shield; print(pow_shield.solver_info()["solver"])'}, "native\n",
    'the native solver runs');

# runs($script, $n) -> the exit statuses of $n runs, "rc" or "signal N",
# and the stderr of those that wrote any
sub runs {
    my ($script, $n) = @_;
    my (@status, @err);
    for (1 .. $n) {
        my (undef, undef, $err) = $t->run_argv($PY, $t->path($script));
        push @status, $? & 127 ? 'signal ' . ($? & 127) : $? >> 8;
        push @err, $err if length $err;
    }
    return (\@status, \@err);
}

# exit_ok($script, $n, $name): $n runs all exit 0 and write nothing on stderr
sub exit_ok {
    my ($script, $n, $name) = @_;
    my ($status, $err) = runs($script, $n);
    is(join(' ', @$status), join(' ', (0) x $n), "$name: $n runs all exit 0, none aborts");
    is(join('', @$err), '', "$name: nothing on stderr");
}

my ($block) = readme_blocks("$REPO/clients/python/README.md", 'Paying ahead');
ok($block, 'clients/python/README.md has a python example under "Paying ahead"');
my ($text, $line) = @{ $block || [''] };
$text =~ s{https://api\.example\.com}{$base}g;
$t->write_file('readme.py', $text);
exit_ok('readme.py', 20, "README.md:$line (Paying ahead)");

$t->write_file('auth.py', <<"EOF");
import pow_shield, requests
for _ in range(7):
    requests.get("$base/items", auth=pow_shield.RequestsAuth()).raise_for_status()
EOF
exit_ok('auth.py', 10, 'requests.get(url, auth=RequestsAuth()) x7');

# a solve that would take months, in a daemon thread, when the program
# ends: it stops (Cancelled) and the exit waits for no more than its chunk
for my $processes (1, 4) {
    $t->write_file("long-$processes.py", <<"EOF");
import threading, time, pow_shield
def solve():
    try:
        pow_shield.solve("00112233445566778899aabbccddeeff", 12, max_solve_time=None, processes=$processes)
    except pow_shield.Cancelled:
        pass
threading.Thread(target=solve, daemon=True).start()
time.sleep(0.05)  # well into the search
EOF
    exit_ok("long-$processes.py", 5, "a difficulty-12 solve on $processes thread(s) at exit");
}

$t->done_testing;
