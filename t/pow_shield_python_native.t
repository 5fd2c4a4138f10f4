#!/usr/bin/perl

# The Python client's native solver (issue 21): `pip install ./clients/python`
# on a machine with a Rust toolchain builds pow_shield._native (the protocol
# crate's SHA-NI search through PyO3) and solver_info() says "native"; it
# pays a bits challenge. POW_SHIELD_PURE_PYTHON=1 forces the pure-Python
# solver, which pays it too; an install without the build
# (POW_SHIELD_NO_NATIVE=1) falls back to it.  An install where no Rust
# toolchain is (no cargo on PATH) falls back too, but not silently (issue
# 39 point 6): solver_info() says why (it blamed "a circular import") and
# the first solve warns (RuntimeWarning) how to get the native solver;
# POW_SHIELD_NO_NATIVE=1, a choice, warns nothing.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Test::PowShield qw(:pow :util);

###############################################################################

my $PY = $ENV{TEST_PYTHON} || '/usr/bin/python3';
plan(skip_all => "$PY not found (apt-get install python3)") unless -x $PY;
plan(skip_all => 'no setuptools-rust (apt-get install python3-setuptools-rust)')
    unless system("'$PY' -c 'import setuptools_rust' 2>/dev/null") == 0;
plan(skip_all => 'no cargo') unless system('cargo --version >/dev/null 2>&1') == 0;

my $t = Test::PowShield->new;

$t->write_file_expand('nginx.conf', http_conf(<<'EOF'));
    server {
        %%TEST_SERVER%%
        pow_shield_key $http_x_client;
        pow_shield_strikes off;

        location /bits/ {
            pow_shield_limit 1 1h;
            pow_shield_difficulty 13b;
        }
    }
EOF
$t->write_file('html/bits/data.json', qq({"dir":"bits"}\n));
$t->run;

###############################################################################

my $dir = $t->testdir;
my $src = "$Test::PowShield::REPO/clients/python";

sub install {
    my ($site, %env) = @_;
    local @ENV{keys %env} = values %env;
    delete local $ENV{CARGO};
    my $out = qx{'$PY' -m pip install --quiet --no-build-isolation --no-deps --no-index --target '$site' '$src' 2>&1};
    return ($? >> 8, $out);
}

# python($site, $code, %env) -> output
sub python {
    my ($site, $code, %env) = @_;
    local $ENV{PYTHONPATH} = $site;
    local @ENV{keys %env} = values %env;
    $t->write_file('run.py', $code);
    return scalar qx{'$PY' '$dir/run.py' 2>&1};
}

# A PATH with python3 and nothing else: no cargo.
my $bare = "$dir/bare-bin";
mkdir $bare or die "$bare: $!";
symlink $PY, "$bare/python3" or die "symlink: $!";

my $url = 'http://127.0.0.1:' . $t->port(8080) . '/bits/data.json';
my $pay = <<"EOF";
import pow_shield, urllib.request
info = pow_shield.solver_info()
def get():
    return urllib.request.urlopen(urllib.request.Request("$url", headers=headers))
headers = {"X-Client": CLIENT}
try:
    get()
except Exception:
    pass
try:
    get()
except urllib.error.HTTPError as e:
    c = pow_shield.Challenge.from_response(e.code, dict(e.headers), e.read())
    nonce = pow_shield.solve(c.salt, c.difficulty, bits=c.bits, processes=1)
    headers.update(c.headers(nonce))
    print(info["solver"], info.get("engine"), c.bits, c.difficulty, get().status)
EOF

# the native build

my ($rc, $out) = install("$dir/native");
is($rc, 0, 'pip install ./clients/python succeeds with a Rust toolchain') or diag($out);
ok(scalar(glob("$dir/native/pow_shield/_native*.so")), 'the native extension is installed');
like(python("$dir/native", "CLIENT = 'native'\n$pay"),
    qr/^native (sha-ni \(\d lanes\)|portable) 13 4 200$/m,
    'native: solver_info() says native; it pays a 13-bit challenge');

like(python("$dir/native", "CLIENT = 'forced'\n$pay", POW_SHIELD_PURE_PYTHON => 1),
    qr/^python hashlib 13 4 200$/m,
    'POW_SHIELD_PURE_PYTHON=1: the pure-Python solver runs and pays');

# an install without the build

($rc, $out) = install("$dir/pure", POW_SHIELD_NO_NATIVE => 1);
is($rc, 0, 'pip install without the native build succeeds') or diag($out);
ok(!glob("$dir/pure/pow_shield/_native*"), 'no native extension installed');
my $without = python("$dir/pure", "CLIENT = 'pure'\n$pay");
like($without, qr/^python hashlib 13 4 200$/m,
    'without the extension: the pure-Python solver runs and pays');
unlike($without, qr/RuntimeWarning/, 'POW_SHIELD_NO_NATIVE=1, a choice: no warning');

# an install where no Rust toolchain is

($rc, $out) = install("$dir/nocargo", PATH => $bare);
is($rc, 0, 'pip install without cargo on PATH succeeds') or diag($out);
ok(!glob("$dir/nocargo/pow_shield/_native*"), 'without cargo: no native extension installed');
my $info = python("$dir/nocargo", "import pow_shield\nprint(pow_shield.solver_info()['reason'])\n");
like($info, qr/^not built: no Rust toolchain \(cargo\) was found at install; install a Rust toolchain/,
    'without cargo: solver_info() says no Rust toolchain was found, and what to do');
unlike($info, qr/circular import/, 'without cargo: solver_info() blames no circular import');
my $warned = python("$dir/nocargo", "CLIENT = 'nocargo'\n$pay");
like($warned, qr/^python hashlib 13 4 200$/m, 'without cargo: the pure-Python solver pays');
my @warnings = $warned =~ /RuntimeWarning: pow_shield solves in pure Python, about 25 times slower[^\n]*no Rust toolchain/g;
is(scalar @warnings, 1, 'without cargo: the first solve warns, once');

$t->done_testing;
