#!/usr/bin/perl

# The pow-shield CLI (objs/pow-shield) against the module: it pays a 429,
# solves the fresh challenge of a 409/410/422, waits out Retry-After with
# --wait, stops with its documented exit codes when blocked, when the
# connection is closed (444) and above --max-difficulty.

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

$t->write_file_expand('nginx.conf', <<'EOF');
%%TEST_GLOBALS%%

events {
}

http {
    %%TEST_GLOBALS_HTTP%%

    default_type application/json;

    log_format cli '$http_x_client $status $pow_shield_result';

    server {
        listen 127.0.0.1:%%PORT_8080%%;
        server_name localhost;

        root %%TESTDIR%%/html;
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
}
EOF

$t->write_file("html/$_/data.json", qq({"dir":"$_"}\n))
    for qw(api ttl slow hard block close);

$t->run;

###############################################################################

my $base = 'http://127.0.0.1:' . $t->port(8080);

# cli($client, $dir, @args) -> ($exit_code, $stdout, $stderr)
sub cli {
    my ($client, $dir, @args) = @_;
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

# --max-difficulty: exit 92, nothing sent after the challenge

{
    is(get('cheap', 'hard')->status, 200, 'cheap: within the limit');
    my ($rc, $out, $err) = cli('cheap', 'hard', '--max-difficulty', '4');
    is($rc, 92, 'cheap: a difficulty-6 challenge over --max-difficulty 4: exit 92');
    like($err, qr/difficulty 6 is above the limit of 4/, 'cheap: says why');
    is($out, '', 'cheap: no output');
    is(seen('cheap'), '200 pass, 429 challenge', 'cheap: no request after the challenge');
}

# blocked by the circuit breaker: exit 90

{
    is(get('bad', 'block')->status, 200, 'bad: within the limit');
    is(get('bad', 'block')->status, 429, 'bad: one offence');
    my ($rc, $out, $err) = cli('bad', 'block');
    is($rc, 90, 'bad: blocked, exit 90');
    like($err, qr/blocked by the server's circuit breaker/, 'bad: says so');
    is($out, '', 'bad: no output');
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

$t->done_testing;
