#!/usr/bin/perl

# The pow-shield CLI (objs/pow-shield) against the module: it pays a 429,
# solves the fresh challenge of a 409/410/422, waits out Retry-After with
# --wait, stops with its documented exit codes when blocked, when the
# connection is closed (444) and above --max-difficulty. Over https it
# verifies the server's certificate (system store, --cacert, -k) and exits
# 60 when it cannot.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Test::PowShield qw(:pow :util);
use Time::HiRes qw(sleep);

###############################################################################

my $cli = $ENV{TEST_POW_SHIELD_CLI} // "$Test::PowShield::REPO/objs/pow-shield";
plan(skip_all => "no $cli (make build)") unless -x $cli;

my $t = Test::PowShield->new;

# https: a test CA, and two certificates it signs, one for 127.0.0.1 and one
# for another name. The CA is in no system store.
my $tls = $t->nginx_version_info =~ /--with-http_ssl_module/
    && system('openssl version >/dev/null 2>&1') == 0;
if ($tls) {
    my $d = $t->testdir;
    my $ec = '-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes';
    $t->write_file('ok.ext', "subjectAltName = IP:127.0.0.1\n");
    $t->write_file('other.ext', "subjectAltName = DNS:other.example\n");
    my @cmds = (
        "openssl req -x509 $ec -days 2 -subj '/CN=pow-shield test CA'"
            . " -addext basicConstraints=critical,CA:TRUE"
            . " -addext keyUsage=critical,keyCertSign"
            . " -keyout $d/ca.key -out $d/ca.pem",
        map {
            ("openssl req -new $ec -subj /CN=$_ -keyout $d/$_.key -out $d/$_.csr",
             "openssl x509 -req -in $d/$_.csr -CA $d/ca.pem -CAkey $d/ca.key"
                 . " -CAcreateserial -days 2 -extfile $d/$_.ext -out $d/$_.pem")
        } qw(ok other)
    );
    for my $cmd (@cmds) {
        system("$cmd >/dev/null 2>&1") == 0 or die "failed: $cmd\n";
    }
}

# Only the test's CA, whatever the environment says.
delete @ENV{qw(SSL_CERT_FILE SSL_CERT_DIR)};

my $conf = http_conf(<<'EOF');
    log_format cli '$http_x_client $status $pow_shield_result';

    server {
        %%TEST_SERVER%%
        access_log %%TESTDIR%%/cli.log cli;

        pow_shield_key $http_x_client;
        pow_shield_difficulty 3;

        location /api/ {
            pow_shield_limit 1 1h;
            pow_shield_strikes off;
        }

        location /ttl/ {
            pow_shield_limit 1 1h;
            pow_shield_strikes off;
            pow_shield_challenge_ttl 1s;
        }

        location /slow/ {
            pow_shield_limit 1 2s;
            pow_shield_strikes off;
        }

        location /hard/ {
            pow_shield_limit 1 1h;
            pow_shield_strikes off;
            pow_shield_difficulty 6;
        }

        location /block/ {
            pow_shield_limit 1 1h;
            pow_shield_strikes 1 60s;
        }

        location /close/ {
            pow_shield_limit 1 1h;
            pow_shield_strikes 1 60s;
            pow_shield_block_status 444;
        }
    }
%%TLS_SERVERS%%
EOF

my $tls_servers = <<'EOF';
    server {
        listen 127.0.0.1:%%PORT_8443%% ssl;
        server_name localhost;

        ssl_certificate %%TESTDIR%%/ok.pem;
        ssl_certificate_key %%TESTDIR%%/ok.key;

        root %%TESTDIR%%/html;
        access_log %%TESTDIR%%/cli.log cli;

        pow_shield_key $http_x_client;
        pow_shield_difficulty 3;

        location /api/ {
            pow_shield_limit 1 1h;
            pow_shield_strikes off;
        }
    }

    server {
        listen 127.0.0.1:%%PORT_8444%% ssl;
        server_name localhost;

        ssl_certificate %%TESTDIR%%/other.pem;
        ssl_certificate_key %%TESTDIR%%/other.key;

        root %%TESTDIR%%/html;
        access_log %%TESTDIR%%/cli.log cli;
    }
EOF

$conf =~ s/%%TLS_SERVERS%%/$tls ? $tls_servers : ''/e;
$t->write_file_expand('nginx.conf', $conf);

$t->write_file("html/$_/data.json", qq({"dir":"$_"}\n))
    for qw(api ttl slow hard block close);

$t->run;

###############################################################################

my $base = 'http://127.0.0.1:' . $t->port(8080);

# cli($client, $dir, @args) -> ($exit_code, $stdout, $stderr)
sub cli {
    my ($client, $dir, @args) = @_;
    return cli_at($base, $client, $dir, @args);
}

# The same against another server: cli_at("https://...", $client, $dir, @args)
sub cli_at {
    my ($base, $client, $dir, @args) = @_;
    my ($out, $err) = map { $t->path("cli.$_") } qw(out err);
    my $pid = fork // die "fork: $!";
    if (!$pid) {
        open STDOUT, '>', $out or die "$out: $!";
        open STDERR, '>', $err or die "$err: $!";
        exec $cli, 'get', '-H', "X-Client: $client", @args, "$base/$dir/data.json";
        exit 127;
    }
    waitpid($pid, 0);
    return ($? >> 8, $t->read_file('cli.out'), $t->read_file('cli.err'));
}

sub get {
    my ($client, $dir, %h) = @_;
    return $t->http_get("/$dir/data.json", 'X-Client' => $client, %h);
}

# What the server saw from one client: "status result" per request.
sub seen {
    my ($client) = @_;
    return join ', ', map { /^\Q$client\E (.*)$/ ? $1 : () }
        split /\n/, $t->read_file('cli.log');
}

# over the limit: the CLI pays the 429 and prints the body

{
    my ($rc, $out) = cli('pay', 'api');
    is($rc, 0, 'pay: within the limit, exit 0');
    ($rc, $out, my $err) = cli('pay', 'api', '-v');
    is($rc, 0, 'pay: over the limit, exit 0');
    is($out, qq({"dir":"api"}\n), 'pay: the body of the paid request');
    like($err, qr/HTTP 429: solving difficulty 3/, 'pay: -v tells the solve');
    is(seen('pay'), '200 pass, 429 challenge, 200 solved',
        'pay: the server saw one 429, then one solved request');
}

# a spent solution: the 409's fresh challenge is solved

{
    is(get('spent', 'api')->status, 200, 'spent: within the limit');
    my @pow = solution(get('spent', 'api'));
    is(get('spent', 'api', @pow)->status, 200, 'spent: the solution is used once');
    my ($rc, $out, $err) = cli('spent', 'api', '-v',
        '-H', "X-PoW-Challenge: $pow[1]", '-H', "X-PoW-Nonce: $pow[3]");
    is($rc, 0, 'spent: exit 0');
    is($out, qq({"dir":"api"}\n), 'spent: the body');
    like($err, qr/HTTP 409: solving/, 'spent: the 409 came with a challenge, solved');
    like(seen('spent'), qr/409 invalid, 200 solved$/, 'spent: 409, then solved');
}

# an expired challenge: the 410's fresh challenge is solved

{
    is(get('expired', 'ttl')->status, 200, 'expired: within the limit');
    my @pow = solution(get('expired', 'ttl'));
    sleep(2.2);
    my ($rc, $out, $err) = cli('expired', 'ttl', '-v',
        '-H', "X-PoW-Challenge: $pow[1]", '-H', "X-PoW-Nonce: $pow[3]");
    is($rc, 0, 'expired: exit 0');
    like($err, qr/HTTP 410: solving/, 'expired: 410 with a fresh challenge, solved');
    like(seen('expired'), qr/410 invalid, 200 solved$/, 'expired: 410, then solved');
}

# a wrong nonce: the 422's fresh challenge is solved

{
    is(get('wrong', 'api')->status, 200, 'wrong: within the limit');
    my @pow = solution(get('wrong', 'api'), wrong => 1);
    my ($rc, $out, $err) = cli('wrong', 'api', '-v',
        '-H', "X-PoW-Challenge: $pow[1]", '-H', "X-PoW-Nonce: $pow[3]");
    is($rc, 0, 'wrong: exit 0');
    like($err, qr/HTTP 422: solving/, 'wrong: 422 with a fresh challenge, solved');
    like(seen('wrong'), qr/422 invalid, 200 solved$/, 'wrong: 422, then solved');
}

# --wait sleeps Retry-After instead of paying

{
    is(get('patient', 'slow')->status, 200, 'patient: within the limit');
    my ($rc, $out, $err) = cli('patient', 'slow', '-v', '--wait');
    is($rc, 0, 'patient: exit 0');
    like($err, qr/waiting \d+ s \(Retry-After\)/, 'patient: waited');
    unlike($err, qr/solving/, 'patient: solved nothing');
    like(seen('patient'), qr/^200 pass, 429 challenge(, 429 challenge)*, 200 pass$/,
        'patient: admitted without a solution');
}

# --max-difficulty: exit 112, nothing sent after the challenge, which is
# shown as curl shows it

{
    is(get('cheap', 'hard')->status, 200, 'cheap: within the limit');
    my ($rc, $out, $err) = cli('cheap', 'hard', '--max-difficulty', '4');
    is($rc, 112, 'cheap: a difficulty-6 challenge over --max-difficulty 4: exit 112');
    like($err, qr/difficulty 6 is above the limit of 4/, 'cheap: says why');
    like($out, qr/^\{"type":[^\n]*"status":429,/, 'cheap: the 429 given up on on stdout, as curl prints it');
    is(seen('cheap'), '200 pass, 429 challenge', 'cheap: no request after the challenge');
}

# blocked by the circuit breaker: exit 110

{
    is(get('bad', 'block')->status, 200, 'bad: within the limit');
    is(get('bad', 'block')->status, 429, 'bad: one offence');
    my ($rc, $out, $err) = cli('bad', 'block');
    is($rc, 110, 'bad: blocked, exit 110');
    like($err, qr/blocked by the server's circuit breaker/, 'bad: says so');
    is($out, 'Blocked by Circuit Breaker', 'bad: the block body on stdout, as curl prints it');
    like(seen('bad'), qr/403 blocked$/, 'bad: one blocked request, no retry');
}

# a block that closes the connection (444): exit 52

{
    is(get('gone', 'close')->status, 200, 'gone: within the limit');
    is(get('gone', 'close')->status, 429, 'gone: one offence');
    my ($rc, $out, $err) = cli('gone', 'close');
    is($rc, 52, 'gone: connection closed without a response, exit 52');
    like($err, qr/closed the connection/, 'gone: says so');
}

# https: the certificate is verified against the system store, or
# --cacert's; -k skips verification; a rejected certificate exits 60

SKIP: {
    skip 'no openssl, or nginx without the ssl module', 17 unless $tls;

    my $https = 'https://127.0.0.1:' . $t->port(8443);
    my $other = 'https://127.0.0.1:' . $t->port(8444);
    my $ca = $t->path('ca.pem');

    my ($rc, $out, $err) = cli_at($https, 'tls', 'api', '--cacert', $ca);
    is($rc, 0, 'tls: --cacert: within the limit over https, exit 0');
    ($rc, $out, $err) = cli_at($https, 'tls', 'api', '--cacert', $ca, '-v');
    is($rc, 0, 'tls: --cacert: over the limit, exit 0');
    is($out, qq({"dir":"api"}\n), 'tls: --cacert: the body of the paid request');
    like($err, qr/HTTP 429: solving difficulty 3/, 'tls: --cacert: paid the challenge');
    is(seen('tls'), '200 pass, 429 challenge, 200 solved',
        'tls: --cacert: the server saw one 429, then one solved request');

    ($rc, $out, $err) = cli_at($https, 'untrusted', 'api');
    is($rc, 60, 'untrusted: a CA not in the system store: exit 60');
    like($err, qr/TLS certificate could not be verified: unable to get local issuer certificate/,
        'untrusted: says why');
    like($err, qr/--cacert FILE.*-k\/--insecure/, 'untrusted: says what to do');
    is($out, '', 'untrusted: no output');
    is(seen('untrusted'), '', 'untrusted: no request sent');

    ($rc, $out) = cli_at($https, 'insecure', 'api', '-k');
    is($rc, 0, 'insecure: -k accepts the unverifiable certificate');
    is($out, qq({"dir":"api"}\n), 'insecure: the body');

    ($rc, $out, $err) = cli_at($other, 'misnamed', 'api', '--cacert', $ca);
    is($rc, 60, 'misnamed: a trusted certificate for another host name: exit 60');
    like($err, qr/could not be verified: .*mismatch/, 'misnamed: says the name does not match');
    like($err, qr/for another host name/, 'misnamed: and does not suggest --cacert');

    ($rc, $out, $err) = cli_at($https, 'nocafile', 'api', '--cacert', $t->path('missing.pem'));
    is($rc, 77, 'nocafile: an unreadable --cacert file: exit 77');

    ($rc, $out, $err) = cli_at('https://127.0.0.1:' . $t->port(8080), 'plain', 'api');
    is($rc, 35, 'plain: https to a plain http port: TLS handshake failed, exit 35');
}

$t->done_testing;
