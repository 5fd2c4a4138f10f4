#!/usr/bin/perl

# `pow-shield get` shows the circuit breaker's block response as curl does
# (issue 26 point 9): -w '%{http_code}' prints 403 (it printed 000) and -i
# the block response's status line and headers (it printed nothing), while
# the exit code stays 110 and the error goes to stderr. Each is compared
# with Debian's curl on the same blocked client.

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

$t->write_file_expand('nginx.conf', http_conf(<<'EOF2'));
    server {
        %%TEST_SERVER%%

        pow_shield_key $http_x_client;

        location /block/ {
            pow_shield_limit 1 1h;
            pow_shield_strikes 1 60s;
        }
    }
EOF2

$t->write_file('html/block/data.json', qq({"ok":true}\n));

$t->run;

###############################################################################

my $url = 'http://127.0.0.1:' . $t->port(8080) . '/block/data.json';

# run(@argv) -> ($exit_code, $stdout, $stderr)
sub run { $t->run_argv(@_) }

# The status line and "Name: value" lines of a head, Date left out.
sub head_of {
    my ($text) = @_;
    my ($head) = split /\r\n\r\n/, $text, 2;
    return join "\n", grep { !/^Date:/i } split /\r\n/, $head // '';
}

# a client blocked: 200, 429 (its one strike), then every request 403
is($t->http_get('/block/data.json', 'X-Client' => 'bad')->status, 200, 'within the limit');
is($t->http_get('/block/data.json', 'X-Client' => 'bad')->status, 429, 'one offence');
is($t->http_get('/block/data.json', 'X-Client' => 'bad')->status, 403, 'blocked');

my @who = ('-H', 'X-Client: bad');

{
    my (undef, $curl) = run('curl', '-s', '-o', '/dev/null', '-w', '%{http_code}', @who, $url);
    my ($rc, $out, $err) = run($cli, 'get', '-s', '-o', '/dev/null', '-w', '%{http_code}', @who, $url);
    is($curl, '403', "curl -w '%{http_code}': 403");
    is($out, $curl, "pow-shield -w '%{http_code}': 403, as curl");
    is($rc, 110, 'pow-shield: blocked, exit 110');
}

{
    my (undef, $curl) = run('curl', '-s', '-i', @who, $url);
    my ($rc, $out, $err) = run($cli, 'get', '-i', @who, $url);
    like($out, qr{^HTTP/1\.1 403 Forbidden\r\n}, 'pow-shield -i: the block status line');
    like($out, qr{\r\nX-PoW-Shield: blocked\r\n}, 'pow-shield -i: X-PoW-Shield: blocked');
    is(head_of($out), head_of($curl), 'pow-shield -i: the same status line and headers as curl -i');
    is($rc, 110, 'pow-shield -i: exit 110');
    like($err, qr/blocked by the server's circuit breaker/, 'pow-shield -i: says why on stderr');
}

done_testing;
