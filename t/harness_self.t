#!/usr/bin/perl

# Sanity checks of the test harness itself (t/lib/Test/PowShield*.pm):
# ports, config expansion, start/reload/stop, HTTP parsing, two instances,
# the PoW helpers and Redis fault injection.  Runs against our nginx with the
# module loaded when it is built, else against Debian's /usr/sbin/nginx.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Digest::SHA qw(sha256_hex hmac_sha256);
use Test::PowShield qw(:pow http_conf);

###############################################################################

my %opts;
{
    my $probe = Test::PowShield->new(allow_missing => 1);
    if ($probe->missing) {
        plan skip_all => 'neither our nginx nor /usr/sbin/nginx available'
            unless -x '/usr/sbin/nginx';
        diag('module not built: ' . $probe->missing
            . '; using /usr/sbin/nginx without the module');
        %opts = (binary => '/usr/sbin/nginx', module => undef);
    }
}

my $t = Test::PowShield->new(%opts);

my $conf = <<'EOF';
%%TEST_GLOBALS%%

events {
}

http {
    %%TEST_GLOBALS_HTTP%%

    server {
        listen 127.0.0.1:%%PORT_8080%%;
        server_name localhost;

        location / {
            add_header X-Multi one;
            add_header X-Multi two;
            return 200 "port %%PORT_8080%% other %%PORT_8081%%\n";
        }

        location /json {
            default_type application/json;
            return 200 '{"a":[1,2],"b":"c"}';
        }

        location /pid {
            return 200 "$pid";
        }
    }

    server {
        listen 127.0.0.1:%%PORT_8081%%;
        server_name localhost;

        location / {
            return 201 "second";
        }
    }
}
EOF

# port(): logical ports map to distinct free ports, stable per object

isnt($t->port(8080), $t->port(8081), 'logical ports map to distinct ports');
is($t->port(8080), $t->port(8080), 'a logical port maps to the same port');
like($t->port(8080), qr/^\d+$/, 'mapped port is a number');

# write_file_expand(): globals and ports substituted

my $path = $t->write_file_expand('nginx.conf', $conf);
my $text = $t->read_file('nginx.conf');
unlike($text, qr/%%/, 'no placeholders left in nginx.conf');
like($text, qr/^pid \Q${\$t->testdir}\E\/nginx\.pid;/m, 'pid inside the temp dir');
like($text, qr/^error_log \Q${\$t->testdir}\E\/error\.log debug;/m,
    'error_log debug inside the temp dir');
like($text, qr/client_body_temp_path \Q${\$t->testdir}\E/,
    'temp paths inside the temp dir');
if (defined $t->module) {
    like($text, qr/^load_module \Q${\$t->module}\E;/m, 'load_module line');
} else {
    unlike($text, qr/load_module/, 'no load_module without a module');
}

# http_conf(): the preamble around an http block; %%TEST_SERVER%%: the
# test server's listen, name and root, at the macro's indentation

my %preamble = (workers => 2, main => 'worker_rlimit_nofile 512;',
    events => 'worker_connections 64;');
$t->write_file_expand('wrapped.conf', http_conf(<<'EOF', %preamble));
    server {
        %%TEST_SERVER%%
    }
EOF
my $wrapped = $t->read_file('wrapped.conf');
my $dir = $t->testdir;
like($wrapped, qr/\A\Q${\$t->test_globals}\E/, 'http_conf: the globals first');
like($wrapped, qr/^worker_rlimit_nofile 512;\n+worker_processes 2;\n+events \{\n/m,
    'http_conf: main, workers, events');
like($wrapped, qr/^events \{\nworker_connections 64;\n\}\n+http \{\n/m,
    'http_conf: the inside of events');
my $http_globals = $t->test_globals_http;
like($wrapped, qr/^http \{\n    \Q$http_globals\E\n+    default_type application\/json;\n/m,
    'http_conf: http opens with the http globals and default_type');
my $port = $t->port(8080);
my $server = "        listen 127.0.0.1:$port;\n        server_name localhost;\n\n"
    . "        root $dir/html;\n    }\n}\n";
is(substr($wrapped, -length $server), $server,
    '%%TEST_SERVER%%: listen, server_name, root; http closed after the block');
my ($rc, $out) = $t->test_config('wrapped.conf');
is($rc, 0, 'nginx -t accepts an http_conf config') or diag($out);

# test_config(): a valid config passes

($rc, $out) = $t->test_config;
is($rc, 0, 'nginx -t accepts the config') or diag($out);

# test_config(): an invalid config fails with file:line

$t->write_file('bad.conf', "events {}\nhttp {\n    no_such_directive on;\n}\n");
($rc, $out) = $t->test_config('bad.conf');
isnt($rc, 0, 'nginx -t rejects an unknown directive');
like($out, qr/unknown directive "no_such_directive" in \S*bad\.conf:3/,
    'nginx -t output names the directive and file:line');

# run(): both servers answer

$t->run;
ok($t->master_pid, 'nginx started');
my $r = $t->http_get('/');
is($r->status, 200, 'GET / is 200');
is($r->body, "port ${\$t->port(8080)} other ${\$t->port(8081)}\n",
    'ports expanded in the config');
is($r->header('x-multi'), 'one, two', 'repeated header joined');
is_deeply([$r->header_values('X-MULTI')], ['one', 'two'],
    'repeated header values kept, case-insensitive name');
ok(!defined $r->header('X-Absent'), 'absent header is undef');
is($t->http_get('/', -port => 8081)->status, 201, 'second port answers');
is_deeply($t->http_get('/json')->json, { a => [1, 2], b => 'c' },
    'JSON body decoded');

# http(): raw request, HTTP/1.1 chunked response de-chunked

$r = $t->http("GET /pid HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
is($r->status, 200, 'raw HTTP/1.1 request');
my $master = $t->master_pid;
my @workers = $t->worker_pids;
ok(@workers >= 1, 'worker pids found');
like($r->body, qr/^\d+$/, 'worker pid served');

# http_pipeline(): keep-alive responses split by their framing

my @rs = $t->http_pipeline(['/', '/json', '/pid']);
is(join(' ', map { $_->status } @rs), '200 200 200', 'pipelined: 3 responses');
is_deeply($rs[1]->json, { a => [1, 2], b => 'c' }, 'pipelined: bodies split');
like($rs[2]->body, qr/^\d+$/, 'pipelined: last body');

# reload(): the worker set changes and new workers answer

ok($t->reload, 'reload returns true');
my @new = $t->worker_pids;
ok(@new && !grep({ my $w = $_; grep { $_ == $w } @workers } @new),
    'workers replaced after HUP');
is($t->master_pid, $master, 'same master after reload');
is($t->http_get('/')->status, 200, 'new workers answer');

# reload() with a broken config returns false and keeps serving

$t->write_file('nginx.conf', $text . "\nbroken directive;\n");
ok(!$t->reload(timeout => 2), 'reload with a bad config returns false');
is($t->http_get('/')->status, 200, 'old workers still answer');
$t->write_file('nginx.conf', $text);

# a second instance: own dir, own ports

my $t2 = Test::PowShield->new(%opts);
isnt($t2->testdir, $t->testdir, 'second instance has its own dir');
isnt($t2->port(8080), $t->port(8080), 'second instance has its own ports');
$t2->write_file_expand('nginx.conf', $conf);
$t2->run;
is($t2->http_get('/')->body,
    "port ${\$t2->port(8080)} other ${\$t2->port(8081)}\n",
    'second instance answers on its ports');
$t2->stop;
ok(!$t2->master_pid, 'second instance stopped');
is($t->http_get('/')->status, 200, 'first instance still answers');

# transport failure: a Response with status undef

my $dead = Test::PowShield->new(%opts);
$r = $dead->http_get('/');
ok(!defined $r->status, 'no status when nothing listens');
ok($r->error, 'transport error recorded');

# PoW helpers (docs/protocol.md)

is(b64url_encode("\xfb\xff"), '-_8', 'base64url: URL alphabet, no padding');
is(b64url_decode('-_8'), "\xfb\xff", 'base64url decode');

my $secret = 'k' x 32;
my $payload = { ip => '127.0.0.1', ts => now_ms(), difficulty => 2,
    salt => 'ab' x 16 };
my $token = forge_token($secret, $payload);
my $tok = decode_token($token);
is_deeply($tok->{payload}, $payload, 'forged token decodes to its payload');
is($tok->{mac_b64},
    b64url_encode(hmac_sha256($tok->{payload_b64}, $secret)),
    'MAC is HMAC-SHA256 over the encoded payload');
unlike($token, qr/[=+\/]/, 'token has no padding or non-URL characters');
ok(!defined decode_token('a.b.c'), 'a.b.c is not a token');

my $nonce = solve('ab' x 16, 2);
like($nonce, qr/^\d+$/, 'nonce is decimal');
like(sha256_hex(('ab' x 16) . $nonce), qr/^00/, 'solve() meets the difficulty');
ok(!hash_ok('ab' x 16, wrong_nonce('ab' x 16, 2), 2), 'wrong_nonce() fails');
my $exact = solve('ab' x 16, 1, exact => 1);
ok(hash_ok('ab' x 16, $exact, 1) && !hash_ok('ab' x 16, $exact, 2),
    'solve(exact) meets d but not d+1');

# Redis

SKIP: {
    skip 'redis-server not found', 14 unless Test::PowShield::Redis::available();

    my $redis = $t->run_redis;
    ok($redis->pid, 'redis started');
    is($t->redis_cmd('PING'), 'PONG', 'PING');
    is($t->redis_cmd('SET', 'k', 'v'), 'OK', 'SET');
    is($t->redis_cmd('GET', 'k'), 'v', 'GET');
    is_deeply($t->redis_cmd('MGET', 'k', 'none'), ['v', undef], 'array reply');
    is($t->redis_cmd('INCR', 'n'), 1, 'integer reply');

    $t->pause_redis;
    ok(!defined $t->redis_cmd('PING'), 'paused redis does not answer');
    is($redis->error, 'timeout', 'paused redis: timeout');
    $t->resume_redis;
    is($t->redis_cmd('PING'), 'PONG', 'resumed redis answers');

    my $port = $redis->port;
    $t->kill_redis;
    ok(!defined $t->redis_cmd('PING'), 'killed redis does not answer');
    $t->restart_redis;
    is($redis->port, $port, 'restarted on the same port');
    is($t->redis_cmd('GET', 'k'), undef, 'restarted redis is empty');
    $t->stop_redis;

    my $t3 = Test::PowShield->new(%opts);
    my $auth = $t3->run_redis(requirepass => 'sesame');
    ok(!defined $auth->cmd(noauth => 1, 'PING')
        && $auth->error =~ /NOAUTH/, 'requirepass: unauthenticated NOAUTH');
    is($auth->cmd('PING'), 'PONG', 'requirepass: authenticated PING');
}

$t->done_testing;
