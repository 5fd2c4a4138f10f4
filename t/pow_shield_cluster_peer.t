#!/usr/bin/perl

# Cluster mode against a peer that is not the Redis we expect (a wrong port
# in pow_shield_redis, a hostile server): the client must neither grow memory
# without bound nor wait for its deadline on garbage. It drops the
# connection, logs why, and the request is decided by pow_shield_fail.  A
# reply nested deeper than any of ours must not crash the worker (a
# recursive decoder overflows the stack): it is refused before decoding.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Test::PowShield qw(:pow :redis http_conf);

###############################################################################

my $t = Test::PowShield->new;

# a reply that never ends: a 200 MB bulk string, 2 MB of it sent
fake_peer($t->port(8091), sub { "\$200000000\r\n" . ('x' x (2 << 20)) });
# not RESP at all (an HTTP server on the Redis port)
fake_peer($t->port(8092), sub { "HTTP/1.1 400 Bad Request\r\n\r\n" });
# a proper handshake (SCRIPT LOAD answered with a SHA), then 60,000 nested
# arrays (240 KB) for the script call
fake_peer($t->port(8093), sub {
    return $_[0] =~ /SCRIPT/ ? "\$40\r\n" . ('0' x 40) . "\r\n"
        : ("*1\r\n" x 60000) . ":1\r\n";
});

$t->write_file_expand('nginx.conf', http_conf(<<'EOF', workers => 1));
    pow_shield_secret "cluster-peer-suite-secret-0123456789ab";
    # a long deadline: the connection must be dropped for what it carries,
    # not because time ran out
    pow_shield_redis redis://127.0.0.1:%%PORT_8091%% timeout=30s connect_timeout=30s;

    server {
        %%TEST_SERVER%%

        add_header X-Result $pow_shield_result always;

        location /api/ {
            pow_shield_limit 2 1h;
            pow_shield_key $http_x_client;
        }
    }
EOF
$t->write_file('html/api/data.json', '{"ok":true}');
$t->run;

###############################################################################

my $r = $t->http_get('/api/data.json', 'X-Client' => 'a');
is($r->status, 200, 'endless reply: the request is decided by the fallback');
is($r->header('X-Result'), 'pass', 'endless reply: local bucket passes it');
ok(scalar $t->error_log_lines(
        qr/pow_shield: redis \S+ unavailable \(unreadable reply: bulk string of 200000000 bytes/),
    'endless reply: connection dropped for the announced length');

my @rs = map { $t->http_get('/api/data.json', 'X-Client' => 'b') } 1 .. 3;
is(join(' ', map { $_->status } @rs), '200 200 429',
    'while the peer is unusable, the local bucket limits');

# the same nginx pointed at a peer that speaks HTTP

my $conf = $t->read_file('nginx.conf');
$conf =~ s/127\.0\.0\.1:\d+ timeout=/127.0.0.1:${\ $t->port(8092)} timeout=/;
$t->write_file('nginx.conf', $conf);
ok($t->reload, 'reload onto a peer that is not Redis');
$r = $t->http_get('/api/data.json', 'X-Client' => 'c');
is($r->status, 200, 'not RESP: the request is decided by the fallback');
ok(scalar $t->error_log_lines(qr/pow_shield: redis \S+ unavailable \(unreadable reply/),
    'not RESP: connection dropped as "unreadable reply"');

# a peer answering the script call with a deeply nested array

$conf =~ s/127\.0\.0\.1:\d+ timeout=/127.0.0.1:${\ $t->port(8093)} timeout=/;
$t->write_file('nginx.conf', $conf);
ok($t->reload, 'reload onto a peer that nests arrays');
$r = $t->http_get('/api/data.json', 'X-Client' => 'd');
is($r->status, 200, 'nested reply: the worker lives, the fallback decides');
is($r->header('X-Result'), 'pass', 'nested reply: local bucket passes it');
ok(scalar $t->error_log_lines(qr/unavailable \(unreadable reply: nested array\)/),
    'nested reply: connection dropped as "nested array"');

###############################################################################

$t->done_testing;
