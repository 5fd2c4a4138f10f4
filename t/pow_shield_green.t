#!/usr/bin/perl

# Green zone (docs/protocol.md §1–2): under the limit requests pass and every
# shielded response carries the rate-limit headers selected by
# pow_shield_headers; exempt requests and unshielded locations carry none.
#
# Local mode counts a sliding window, as cluster mode does (docs/directives.md,
# pow_shield_limit): at most n requests in any window; Reset is when the
# oldest counted request leaves it. With "pow_shield_limit 3 1h" that is an
# hour after the first.
#
# Every assertion in local mode and in cluster mode (Test::PowShield::Modes
# each_mode: the zone, then a Redis of the suite's own).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use POSIX qw(ceil);
use Test::PowShield qw(:redis http_conf);
use Test::PowShield::Modes;

###############################################################################

my $t;    # the node of the mode under test (each_mode below)

my $conf = http_conf(<<'EOF');
    %%REDIS%%

    log_format pow '$uri $pow_shield_result $pow_shield_remaining '
                   '$pow_shield_difficulty';

    map $http_x_trusted $pow_key {
        yes      "";
        default  $http_x_client;
    }

    server {
        %%TEST_SERVER%%
        access_log %%TESTDIR%%/pow.log pow;

        pow_shield_difficulty 2;

        # the only location keyed on the default $pow_shield_client
        location /default/ {
            pow_shield_limit 3 1h;
        }

        location /api/ {
            pow_shield_limit 3 1h;
            pow_shield_key $http_x_client;
        }

        location /x/ {
            pow_shield_limit 3 1h;
            pow_shield_key $http_x_client;
            pow_shield_headers x;
        }

        location /ietf/ {
            pow_shield_limit 3 1h;
            pow_shield_key $http_x_client;
            pow_shield_headers ietf;
        }

        location /off/ {
            pow_shield_limit 3 1h;
            pow_shield_key $http_x_client;
            pow_shield_headers off;
        }

        location /both/ {
            pow_shield_limit 3 1m;
            pow_shield_key $http_x_client;
            pow_shield_headers both;
        }

        location /exempt/ {
            pow_shield_limit 1 1h;
            pow_shield_key $pow_key;
        }

        location /open/ {
        }

        location /proxy/ {
            pow_shield_limit 3 1h;
            pow_shield_key $http_x_client;
            proxy_pass http://127.0.0.1:%%PORT_8081%%/;
        }
    }

    # backend for proxied responses
    server {
        listen 127.0.0.1:%%PORT_8081%%;
        server_name localhost;

        location / {
            return 200 '{"backend":true}';
        }

        location /fail {
            return 503;
        }
    }

    # inheritance: server-level limit, location-level off
    server {
        listen 127.0.0.1:%%PORT_8082%%;
        server_name localhost;

        root %%TESTDIR%%/html;

        pow_shield_limit 2 1m;
        pow_shield_key $http_x_client;
        pow_shield_headers x;

        location /api/ {
        }

        location /open/ {
            pow_shield_limit off;
        }
    }
EOF

my %files = map { ("html/$_/data.json" => qq({"dir":"$_"}\n)) }
    qw(default api x ietf off both exempt open);

###############################################################################

sub get {
    my ($client, $uri, %h) = @_;
    return $t->http_get($uri, 'X-Client' => $client, %h);
}

sub present {
    my ($r, @names) = @_;
    return join ' ', grep { $r->has_header($_) } @names;
}

###############################################################################

Test::PowShield::Modes->each_mode($conf, redis => 'timeout=3s', files => \%files, sub {
    my ($m) = @_;
    $t = $m->node(1);

    my @X = qw(x-ratelimit-limit x-ratelimit-remaining x-ratelimit-reset);
    my @IETF = qw(ratelimit-policy ratelimit);

    # under the limit: the request passes to the content handler

    my $r = get('pass', '/api/data.json');
    is($r->status, 200, 'under the limit: 200');
    is($r->body, qq({"dir":"api"}\n), 'under the limit: content served');

    # X-RateLimit-Limit is the configured number of requests

    is($r->header('X-RateLimit-Limit'), 3, 'X-RateLimit-Limit: 3');

    # Remaining: requests the window has room for now (3 - 1)

    is($r->header('X-RateLimit-Remaining'), 2, 'X-RateLimit-Remaining: 2');

    # Reset: epoch seconds when the oldest counted request leaves: an hour

    my $now = time;
    my $reset1 = $r->header('X-RateLimit-Reset');
    like($reset1, qr/^\d+$/, 'X-RateLimit-Reset is an integer');
    ok($reset1 >= $now + 3598 && $reset1 <= $now + 3602,
        'X-RateLimit-Reset: the request leaves the window in 3600 s')
        or diag("now $now reset $reset1");
    if ($m->cluster) {
        # cluster mode: the oldest entry of the client's sorted set, its
        # score (Redis's clock, ms) + the window
        my $z = $m->redis->cmd('ZRANGE', client_key('pass', 'w', 3, 3600000),
            0, 0, 'WITHSCORES') || [];
        my $want = ceil((($z->[1] // 0) + 3600000) / 1000);
        ok(abs($reset1 - $want) <= 1,
            'X-RateLimit-Reset: when the oldest entry of the sorted set leaves (score + window)')
            or diag("$reset1 vs $want");
    }

    # IETF draft headers, default mode "both"

    is($r->header('RateLimit-Policy'), '"pow-shield";q=3;w=3600',
        'RateLimit-Policy: q=3, w=3600 seconds');
    like($r->header('RateLimit'), qr/^"pow-shield";r=2;t=\d+$/,
        'RateLimit: r=2 and t');
    my ($tsec) = ($r->header('RateLimit') // '') =~ /;t=(\d+)/;
    ok(defined $tsec && $tsec >= 3598 && $tsec <= 3602,
        'RateLimit t: seconds to reset (3600)') or diag("t=" . ($tsec // 'undef'));

    # Remaining counts down; Reset stays the first request's (the oldest)

    $r = get('pass', '/api/data.json');
    is($r->header('X-RateLimit-Remaining'), 1, 'second request: Remaining 1');
    my $reset2 = $r->header('X-RateLimit-Reset');
    ok($reset2 - $reset1 >= -1 && $reset2 - $reset1 <= 1,
        'second request: Reset unchanged, the oldest still leaves first')
        or diag("$reset1 -> $reset2");
    like($r->header('RateLimit'), qr/^"pow-shield";r=1;/, 'second request: r=1');

    $r = get('pass', '/api/data.json');
    is($r->status, 200, 'third request (the limit): 200');
    is($r->header('X-RateLimit-Remaining'), 0, 'third request: Remaining 0');
    like($r->header('RateLimit'), qr/^"pow-shield";r=0;/, 'third request: r=0');

    # headers are sent once

    is(scalar(my @v = $r->header_values('X-RateLimit-Limit')), 1,
        'X-RateLimit-Limit sent once');
    is(scalar(@v = $r->header_values('RateLimit')), 1, 'RateLimit sent once');

    # clients are counted separately

    $r = get('other', '/api/data.json');
    is($r->header('X-RateLimit-Remaining'), 2, 'another client has its own bucket');

    # default key $pow_shield_client

    $r = $t->http_get('/default/data.json');
    is($r->status, 200, 'default key: 200');
    is($r->header('X-RateLimit-Remaining'), 2, 'default key: counted');
    $r = $t->http_get('/default/data.json', 'X-Client' => 'ignored');
    is($r->header('X-RateLimit-Remaining'), 1,
        'default key: same address, same bucket');

    # window in seconds in RateLimit-Policy

    $r = get('both', '/both/data.json');
    is($r->header('RateLimit-Policy'), '"pow-shield";q=3;w=60',
        'RateLimit-Policy: 1m is w=60');
    is(present($r, @X, @IETF), join(' ', @X, @IETF), 'headers both: all five');

    # pow_shield_headers x / ietf / off

    $r = get('modes', '/x/data.json');
    is($r->status, 200, 'headers x: 200');
    is(present($r, @X, @IETF), join(' ', @X), 'headers x: only X-RateLimit-*');

    $r = get('modes', '/ietf/data.json');
    is($r->status, 200, 'headers ietf: 200');
    is(present($r, @X, @IETF), join(' ', @IETF),
        'headers ietf: only RateLimit-Policy and RateLimit');

    $r = get('modes', '/off/data.json');
    is($r->status, 200, 'headers off: 200');
    is(present($r, @X, @IETF), '', 'headers off: no rate-limit headers');

    # shielded error responses carry the headers too: 404

    $r = get('errors', '/api/missing.json');
    is($r->status, 404, 'shielded 404');
    is($r->header('X-RateLimit-Limit'), 3, 'shielded 404: X-RateLimit-Limit');
    is($r->header('X-RateLimit-Remaining'), 2, 'shielded 404: counted');
    ok($r->has_header('RateLimit'), 'shielded 404: RateLimit');

    # proxied responses carry the headers, the backend's status is kept

    $r = get('proxy', '/proxy/data');
    is($r->status, 200, 'proxied: 200');
    is($r->body, '{"backend":true}', 'proxied: backend body');
    is($r->header('X-RateLimit-Remaining'), 2, 'proxied: X-RateLimit-Remaining');

    $r = get('proxy', '/proxy/fail');
    is($r->status, 503, 'proxied error: 503 kept');
    is($r->header('X-RateLimit-Remaining'), 1, 'proxied error: headers');

    # exempt: empty key, not counted, never challenged, no headers

    for my $i (1 .. 4) {
        $r = get('exempt', '/exempt/data.json', 'X-Trusted' => 'yes');
        is($r->status, 200, "exempt request $i (limit 1): 200");
    }
    is(present($r, @X, @IETF), '', 'exempt: no rate-limit headers');
    ok(!$r->has_header('X-PoW-Challenge'), 'exempt: no challenge');
    is(scalar @{$m->redis->cmd('KEYS', 'pow:{}*') || []}, 0,
        'exempt: nothing in Redis') if $m->cluster;

    $r = get('exempt', '/exempt/data.json');
    is($r->status, 200, 'same client not exempt: first request passes');
    is($r->header('X-RateLimit-Remaining'), 0,
        'exempt requests were not counted');

    # unshielded location: no headers

    $r = get('open', '/open/data.json');
    is($r->status, 200, 'unshielded: 200');
    is(present($r, @X, @IETF), '', 'unshielded: no rate-limit headers');

    # inheritance: server-level limit and headers apply to a bare location

    $r = get('inherit', '/api/data.json', -port => 8082);
    is($r->status, 200, 'inherited limit: 200');
    is($r->header('X-RateLimit-Limit'), 2, 'inherited limit: 2');
    is(present($r, @X, @IETF), join(' ', @X), 'inherited headers mode x');

    $r = get('inherit', '/open/data.json', -port => 8082);
    is(present($r, @X, @IETF), '', 'location "pow_shield_limit off": no headers');

    # long keys are told apart by their whole value (the zone keeps a key
    # over 32 bytes as its hash, Redis one over 64: around both bounds)

    for my $len (32, 33, 64, 65, 300) {
        my $a = ('k' x ($len - 1)) . 'a';
        my $b = ('k' x ($len - 1)) . 'b';
        get($a, '/api/data.json') for 1 .. 3;
        $r = get($b, '/api/data.json');
        is($r->header('X-RateLimit-Remaining'), 2,
            "$len-byte keys differing in the last byte: separate buckets");
        is(get($a, '/api/data.json')->status, 429,
            "$len-byte key: its own bucket is full");
    }

    # keep-alive: every request on one connection is counted once

    my @rs = $t->http_pipeline([('/api/data.json') x 4], 'X-Client' => 'keepalive');
    is(scalar @rs, 4, 'keep-alive: four responses on one connection');
    is(join(' ', map { $_->status // 'none' } @rs), '200 200 200 429',
        'keep-alive: three pass, the fourth is 429');
    is(join(' ', map { $_->header('X-RateLimit-Remaining') // 'none' } @rs),
        '2 1 0 0', 'keep-alive: Remaining counts down per request');
    is($m->redis->cmd('ZCARD', client_key('keepalive', 'w', 3, 3600000)), 3,
        'keep-alive: 3 entries in Redis, one per admitted request') if $m->cluster;

    # variables in log_format: $pow_shield_result, _remaining, _difficulty

    my @log = grep { length } split /\n/, $t->read_file('pow.log');
    is((grep { m{^/api/data\.json } } @log)[0], '/api/data.json pass 2 2',
        'log: $pow_shield_result pass, remaining 2, difficulty 2');
    like((grep { m{^/exempt/data\.json } } @log)[0], qr{^/exempt/data\.json exempt },
        'log: $pow_shield_result exempt');
    like((grep { m{^/open/data\.json } } @log)[0], qr{^/open/data\.json - },
        'log: unshielded location: $pow_shield_result empty');
});

###############################################################################

Test::PowShield::Modes->done_testing;
