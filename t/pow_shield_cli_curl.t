#!/usr/bin/perl

# `pow-shield get` behaves like curl: every flag a curl user types first is
# run with Debian's curl and with pow-shield against the same nginx, and
# what each prints (stdout; the response lines of -v), what the server saw
# (method, body, headers: the access log) and the exit code must agree. On
# a shielded location, where curl stops at the 429, pow-shield pays and
# reports the same -w variables for the response it ends with.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use IO::Socket::INET;
use Test::More;
use Test::PowShield qw(:pow http_conf);

###############################################################################

my $cli = $ENV{TEST_POW_SHIELD_CLI} // "$Test::PowShield::REPO/objs/pow-shield";
plan(skip_all => "no $cli (make build)") unless -x $cli;
plan(skip_all => 'no curl (apt-get install curl)')
    unless system('curl --version >/dev/null 2>&1') == 0;

# Neither client may go through a proxy of the environment.
delete @ENV{qw(http_proxy https_proxy HTTP_PROXY HTTPS_PROXY ALL_PROXY all_proxy)};

my $t = Test::PowShield->new;

$t->write_file_expand('nginx.conf', http_conf(<<'EOF'));
    log_format seen '$http_x_client|$request_method|$request_uri|$content_type|$http_accept|$http_user_agent|$http_authorization|$http_x_proxied|$request_body';

    server {
        %%TEST_SERVER%%
        access_log %%TESTDIR%%/seen.log seen;

        location /files/ { }

        location /gzip/ {
            gzip on;
            default_type text/plain;
            gzip_types text/plain;
            gzip_min_length 0;
        }

        location = /redirect { return 302 /files/hello.txt; }
        location = /moved { return 301 /echo/after; }
        location = /loop { return 302 /loop; }
        location = /unavailable { return 503; }

        location /echo/ {
            proxy_pass http://127.0.0.1:%%PORT_8081%%;
        }

        location /api/ {
            pow_shield_key $http_x_client;
            pow_shield_limit 1 1h;
            pow_shield_difficulty 2;
            pow_shield_strikes off;
        }
    }

    server {
        listen 127.0.0.1:%%PORT_8081%%;
        server_name localhost;

        location / { return 200 "echo\n"; }
    }

    # a forward proxy for -x: whatever the host, the first server answers
    server {
        listen 127.0.0.1:%%PORT_8082%%;
        server_name localhost;

        location / {
            proxy_pass http://127.0.0.1:%%PORT_8080%%;
            proxy_set_header X-Proxied yes;
        }
    }
EOF

$t->write_file('html/files/hello.txt', "hello, world\n");
$t->write_file('html/files/data.json', qq({"ok":true}\n));
$t->write_file('html/gzip/long.txt', join('', map { "line $_ of a long text\n" } 1 .. 200));
$t->write_file('html/api/data.json', qq({"api":true}\n));
$t->write_file('form.txt', "a=1\r\nb=2\n");

$t->run;

# a port that takes connections and never answers (-m)
my $hang = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => 0,
    Listen => 5, ReuseAddr => 1) or die "listen: $!";

###############################################################################

my $base = 'http://127.0.0.1:' . $t->port(8080);
my $proxy = '127.0.0.1:' . $t->port(8082);
my $dir = $t->testdir;

# run($who, @args) -> { rc, out, err }: curl or `pow-shield get`, in the
# test directory; "%W" in an argument is replaced by the client's name.
sub run {
    my ($who, @args) = @_;
    s/%W/$who/g for @args;
    my @cmd = $who eq 'curl' ? ('curl', @args) : ($cli, 'get', @args);
    my $pid = fork // die "fork: $!";
    if (!$pid) {
        chdir $dir or die "$dir: $!";
        open STDIN, '<', '/dev/null';
        open STDOUT, '>', "$who.out" or die "$who.out: $!";
        open STDERR, '>', "$who.err" or die "$who.err: $!";
        exec @cmd;
        exit 127;
    }
    waitpid($pid, 0);
    return { rc => $? >> 8, out => $t->read_file("$who.out"),
        err => $t->read_file("$who.err") };
}

# The Date header may tick between the two runs.
sub same_day { my ($s) = @_; $s =~ s/^(<?\s*Date:).*$/$1 -/mgi; $s }

# The server's view of each client's requests, without the client's name
# and its default User-Agent (curl/7.88.1, pow-shield/0.1.0).
sub seen {
    my ($who) = @_;
    return [ map { s{\|(?:curl|pow-shield)/[\d.]+\|}{|(default agent)|}r }
        map { /^\Q$who\E\|(.*)$/ ? $1 : () }
        split /\n/, $t->read_file('seen.log') ];
}

# both(name, @args): the same exit code and stdout from both, and the same
# requests in the access log; returns both results for further checks.
sub both {
    my ($name, @args) = @_;
    my $c = run('curl', '-H', 'X-Client: %W', @args);
    my $o = run('ours', '-H', 'X-Client: %W', @args);
    is($o->{rc}, $c->{rc}, "$name: exit code $c->{rc}, as curl");
    is(same_day($o->{out}), same_day($c->{out}), "$name: the same output as curl")
        or diag("curl stderr: $c->{err}\nours stderr: $o->{err}");
    return ($c, $o);
}

# Each comparison starts with an empty log, so seen() is that run's.
sub fresh_log { $t->write_file('seen.log', '') }

sub compare_seen {
    my ($name) = @_;
    is_deeply(seen('ours'), seen('curl'), "$name: the server saw the same requests");
}

# plain GET, -s, -i (status line and header names as sent), -I

fresh_log();
both('GET', '-s', "$base/files/hello.txt");
compare_seen('GET');
both('-i', '-s', '-i', "$base/files/data.json");
both('-I', '-s', '-I', "$base/files/data.json");
compare_seen('-i, -I');

# -v: the response lines ("< ") are the server's, in its case

{
    my @v = map { run($_, '-s', '-v', '-H', 'X-Client: %W', "$base/files/hello.txt") }
        qw(curl ours);
    my @lines = map {
        [ map { s/\s+$//r } grep { /^< \S/ } split /\n/, same_day($_->{err}) ]
    } @v;
    ok(@{$lines[0]} >= 5, '-v: curl shows the response head');
    is_deeply($lines[1], $lines[0], '-v: the same response lines as curl');
    like($v[1]{out}, qr/^hello, world$/, '-v: the body still goes to stdout');
}

# -w: http_code, size_download, url_effective; time_total in seconds

{
    my $w = '%{http_code} %{size_download} %{url_effective} %{num_redirects}\n';
    both('-w', '-s', '-o', '/dev/null', '-w', $w, "$base/files/hello.txt");
    both('-w, 404', '-s', '-o', '/dev/null', '-w', $w, "$base/files/none.txt");
    my ($c, $o) = both('-w refused', '-s', '-w', '%{http_code}',
        'http://127.0.0.1:' . $t->port(8093) . '/');
    is($o->{rc}, 7, '-w, connection refused: exit 7 and http_code 000');
    my $r = run('ours', '-s', '-o', '/dev/null', '-w', '%{time_total}', "$base/files/hello.txt");
    like($r->{out}, qr/^\d+\.\d{6}$/, '-w %{time_total}: seconds, six decimals (as curl)');
}

# -f: no body on an error status, exit 22; --fail-with-body keeps it

both('-f', '-s', '-f', "$base/files/none.txt");
both('--fail-with-body', '-s', '--fail-with-body', "$base/files/none.txt");
both('-f, 200', '-s', '-f', "$base/files/hello.txt");

# -s hides the error message, -S brings it back

{
    my $url = 'http://127.0.0.1:' . $t->port(8093) . '/';
    my ($c, $o) = both('-s', '-s', $url);
    is($o->{err}, '', '-s: nothing on stderr');
    ($c, $o) = both('-sS', '-sS', $url);
    like($o->{err}, qr/\(7\)/, '-sS: the error, with its code, on stderr');
    ok(length $c->{err}, '-sS: curl says something too');
}

# exit codes: 6 for a name that does not resolve, 7 refused, 28 -m

both('unresolvable host', '-s', 'http://no-such-host.invalid/');
both('connection refused', '-s', 'http://127.0.0.1:' . $t->port(8093) . '/');
{
    my ($c, $o) = both('-m 1', '-s', '-m', '1', 'http://127.0.0.1:' . $hang->sockport . '/');
    is($o->{rc}, 28, '-m: a server that never answers: exit 28');
}

# -L follows redirects (POST becomes GET after a 301), -w url_effective

fresh_log();
both('-L', '-s', '-L', '-w', '%{url_effective} %{num_redirects}\n', "$base/redirect");
both('no -L', '-s', '-w', '%{http_code}\n', '-o', '/dev/null', "$base/redirect");
both('-L POST 301', '-s', '-L', '-d', 'x=1', "$base/moved");
compare_seen('-L');
both('-L loop', '-s', '-L', "$base/loop");

# request bodies and headers: -d, --data-binary, --json, -X, -A, -u

fresh_log();
both('-d', '-s', '-d', 'a=1', '-d', 'b=2', "$base/echo/d");
both('-d @file', '-s', '-d', '@form.txt', "$base/echo/file");
both('--data-binary @file', '-s', '--data-binary', '@form.txt', "$base/echo/binary");
both('--json', '-s', '--json', '{"a":1}', "$base/echo/json");
both('-X', '-s', '-X', 'PUT', '-d', 'v', "$base/echo/put");
both('-A', '-s', '-A', 'agent/1.0', "$base/echo/agent");
both('-u', '-s', '-u', 'alice:s3cret', "$base/echo/user");
compare_seen('bodies and headers');

# -x: the request goes to the proxy, the host is never looked up

fresh_log();
both('-x', '-s', '-x', $proxy, 'http://no-such-host.invalid/files/hello.txt');
compare_seen('-x');
is(scalar(grep { /\|yes\|/ } @{seen('curl')}), 1, '-x: through the proxy');

# --compressed: gzip asked for and the body decompressed

fresh_log();
{
    my ($c, $o) = both('--compressed', '-s', '--compressed',
        '-w', '%{size_download}', "$base/gzip/long.txt");
    my ($size) = $o->{out} =~ /(\d+)$/;
    ok($size && $size < 1000, '--compressed: size_download is the compressed size')
        or diag("size $size");
}

# --retry: a 503 is tried again after 1 s, as curl does

fresh_log();
{
    my ($c, $o) = both('--retry 1', '-s', '--retry', '1', '-w', '%{http_code}',
        '-o', '%W.retry', "$base/unavailable");
    is(scalar @{seen('ours')}, 2, '--retry 1: two requests');
    compare_seen('--retry');
}

# several URLs, -o and -O pair with them in order

{
    unlink map { "$dir/$_" } qw(hello.txt data.json curl.body ours.body);
    both('several URLs', '-s', "$base/files/hello.txt", "$base/files/data.json");
    both('-o', '-s', '-o', '%W.body', "$base/files/hello.txt", "$base/files/data.json");
    is($t->read_file('ours.body'), $t->read_file('curl.body'), '-o: the same file as curl');
    is($t->read_file('ours.body'), "hello, world\n", '-o: the first URL\'s body');
    run('curl', '-s', '-O', "$base/files/hello.txt");
    rename "$dir/hello.txt", "$dir/curl.hello.txt";
    my $r = run('ours', '-s', '-O', "$base/files/hello.txt");
    is($r->{rc}, 0, '-O: exit 0');
    is($t->read_file('hello.txt'), $t->read_file('curl.hello.txt'),
        '-O: the file named after the URL, as curl');
    both('-O without a name', '-s', '-O', "$base/files/");
    both('exit code of the last URL', '-s', '-o', '/dev/null',
        'http://127.0.0.1:' . $t->port(8093) . '/', "$base/files/hello.txt");
}

# a shielded location: curl stops at the 429, pow-shield pays through

{
    my $w = '%{http_code} %{url_effective}\n';
    run('ours', '-s', '-H', 'X-Client: payer', '-o', '/dev/null', "$base/api/data.json");
    my $c = run('curl', '-s', '-H', 'X-Client: payer', '-o', '/dev/null', '-w', $w,
        "$base/api/data.json");
    is($c->{out}, "429 $base/api/data.json\n", 'shielded: curl gets the 429');
    my $o = run('ours', '-s', '-H', 'X-Client: payer', '-w', $w, "$base/api/data.json");
    is($o->{out}, qq({"api":true}\n200 $base/api/data.json\n),
        'shielded: pow-shield pays, prints the body and -w of the 200');
}

done_testing;
