#!/usr/bin/perl

# `pow-shield get` against the module, beside Debian's curl (issue 39
# point 6): a 429 it gives up on (--max-difficulty: exit 112, --retries 0:
# exit 114) is shown as curl shows it, -w '%{http_code}' printing 429 (it
# printed 000) and the body on stdout; -m is the time limit of the whole
# request, as curl's: with --wait, a Retry-After that would outlast it is
# paid at once instead of slept (it slept it, whatever -m said), and a
# solve it cuts short is exit 28, with the 429 shown.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Test::PowShield qw(:pow http_conf);

###############################################################################

my $cli = $ENV{TEST_POW_SHIELD_CLI} // "$Test::PowShield::REPO/objs/pow-shield";
plan(skip_all => "no $cli (make build)") unless -x $cli;
plan(skip_all => 'no curl (apt-get install curl)')
    unless system('curl --version >/dev/null 2>&1') == 0;

delete @ENV{qw(http_proxy https_proxy HTTP_PROXY HTTPS_PROXY ALL_PROXY all_proxy)};

my $t = Test::PowShield->new;

$t->write_file_expand('nginx.conf', http_conf(<<'EOF'));
    log_format giveup '$http_x_client $status $pow_shield_result';

    server {
        %%TEST_SERVER%%
        access_log %%TESTDIR%%/giveup.log giveup;

        pow_shield_key $http_x_client;
        pow_shield_strikes off;

        location /dear/ {
            pow_shield_limit 1 1h;
            pow_shield_difficulty 6;
        }

        # a slot frees 30 s after the first request: Retry-After about 30
        location /slow/ {
            pow_shield_limit 1 30s;
            pow_shield_difficulty 1;
        }

        location /forged/ {
            pow_shield_limit 1 1h;
            pow_shield_difficulty 12;
        }
    }
EOF

$t->write_file("html/$_/data.json", qq({"ok":true}\n)) for qw(dear slow forged);
$t->run;

###############################################################################

my $port = $t->port(8080);
sub url { "http://127.0.0.1:$port/$_[0]/data.json" }

# run(@argv) -> ($exit_code, $stdout, $stderr)
sub run { $t->run_argv(@_) }

# The statuses and results of a client's requests, in order.
sub seen {
    my ($client) = @_;
    return join ', ', map { /^\Q$client\E (\d+ \w+)$/ ? $1 : () }
        split /\n/, $t->read_file('giveup.log');
}

for my $case (
    ['--max-difficulty', ['--max-difficulty', '4'], 112],
    ['--retries 0', ['--retries', '0'], 114],
) {
    my ($name, $opts, $code) = @$case;
    my $client = "giveup$code";
    is($t->http_get('/dear/data.json', 'X-Client' => $client)->status, 200, "$name: within the limit");
    my @who = ('-H', "X-Client: $client");
    my (undef, $curl) = run('curl', '-s', '-w', '\n%{http_code}', @who, url('dear'));
    my ($rc, $out, $err) = run($cli, 'get', '-s', '-w', '\n%{http_code}', @who, @$opts, url('dear'));
    is($rc, $code, "$name: exit $code");
    like($curl, qr/\n429$/, "$name: curl -w '%{http_code}': 429");
    like($out, qr/\n429$/, "$name: pow-shield -w '%{http_code}': 429 (not 000), as curl");
    my ($body) = split /\n/, $out;
    like($body, qr/^\{"type":[^\n]*"status":429,/, "$name: the 429's body on stdout, as curl's");
    my (undef, $include) = run($cli, 'get', '-i', @who, @$opts, url('dear'));
    like($include, qr{^HTTP/1\.1 429 Too Many Requests\r\n}, "$name: -i: the 429's status line");
    is(seen($client), '200 pass' . ', 429 challenge' x 3, "$name: curl's 429, then the CLI's two: nothing sent after them");
}

# --wait within -m: a Retry-After of about 30 s outlasts -m 3, so it is paid
# at once instead of slept.
{
    is($t->http_get('/slow/data.json', 'X-Client' => 'patient')->status, 200, 'slow: within the limit');
    my ($rc, $out, $err) = run($cli, 'get', '-s', '-v', '--wait', '-m', '3',
        '-H', 'X-Client: patient', url('slow'));
    is($rc, 0, '--wait -m 3: exit 0');
    unlike($err, qr/waiting \d+ s/, '--wait -m 3: no wait beyond the time limit');
    is(seen('patient'), '200 pass, 429 challenge, 200 solved', '--wait -m 3: paid instead of waiting');
}

# -m running out while a (forged) difficulty 12 is solved: exit 28, as a
# transfer that ran out of time, and the 429 is shown.
{
    is($t->http_get('/forged/data.json', 'X-Client' => 'hasty')->status, 200, 'forged: within the limit');
    my ($rc, $out) = run($cli, 'get', '-s', '-o', '/dev/null', '-w', '%{http_code}', '--threads', '1',
        '-m', '1', '-H', 'X-Client: hasty', url('forged'));
    is($rc, 28, '-m 1 during a solve: exit 28');
    is($out, '429', "-m 1 during a solve: -w '%{http_code}' is the 429's");
}

$t->done_testing;
