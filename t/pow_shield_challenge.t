#!/usr/bin/perl

# Yellow zone (docs/protocol.md §3): over the limit the client gets a 429
# with a signed challenge; a solution admits exactly one request; a replayed
# solution gets 409 with a fresh challenge.
#
# Every assertion in local mode and in cluster mode (Test::PowShield::Modes
# each_mode: the zone, then a Redis of the suite's own).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Test::PowShield qw(:pow http_conf);
use Test::PowShield::Modes;

###############################################################################

my $SECRET = 'challenge-suite-secret-0123456789abcdef';

my $t;    # the node of the mode under test (each_mode below)

my $conf = http_conf(<<"EOF");
    %%REDIS%%
    pow_shield_secret "$SECRET";

    server {
        %%TEST_SERVER%%

        add_header X-Result \$pow_shield_result always;

        pow_shield_key \$http_x_client;
        pow_shield_challenge_ttl 30s;

        location /api/ {
            pow_shield_limit 2 1h;
            pow_shield_difficulty 1;
        }

        location /hard/ {
            pow_shield_limit 1 1h;
            pow_shield_difficulty 2;
        }

        location /proxy/ {
            pow_shield_limit 2 1h;
            pow_shield_difficulty 1;
            proxy_pass http://127.0.0.1:%%PORT_8081%%/;
        }

        location /quiet/ {
            pow_shield_limit 1 1h;
            pow_shield_difficulty 1;
            pow_shield_log_level error;
        }

        location /fast/ {
            pow_shield_limit 2 4s;
            pow_shield_difficulty 1;
        }

        location /tiny/ {
            pow_shield_limit 10 1s;
            pow_shield_difficulty 1;
        }

        location /minute/ {
            pow_shield_limit 3 1m;
            pow_shield_difficulty 1;
        }

        location /bare/ {
            pow_shield_limit 1 1h;
            pow_shield_difficulty 1;
            pow_shield_headers off;
            add_header X-Vars "\$pow_shield_result \$pow_shield_remaining \$pow_shield_difficulty" always;
        }
    }

    server {
        listen 127.0.0.1:%%PORT_8081%%;
        server_name localhost;

        location / {
            return 200 '{"backend":true}';
        }
    }
EOF

my %files = map { ("html/$_/data.json" => qq({"dir":"$_"}\n)) }
    qw(api hard quiet fast bare tiny minute);

###############################################################################

sub get {
    my ($client, $uri, %h) = @_;
    return $t->http_get($uri, 'X-Client' => $client, %h);
}

# fill a client's window, return the first 429
sub exhaust {
    my ($client, $uri, $limit) = @_;
    get($client, $uri) for 1 .. $limit;
    return get($client, $uri);
}

sub with_solution {
    my ($client, $uri, $token, $nonce) = @_;
    return get($client, $uri, 'X-PoW-Challenge' => $token,
        'X-PoW-Nonce' => $nonce);
}

sub solve_token {
    my ($token) = @_;
    my $p = decode_token($token)->{payload};
    return solve($p->{salt}, $p->{difficulty});
}

###############################################################################

Test::PowShield::Modes->each_mode($conf, redis => 'timeout=3s', files => \%files, sub {
    my ($m) = @_;
    $t = $m->node(1);

    # the limit: 2 requests pass, the 3rd is challenged

    my $before = now_ms();
    is(get('shape', '/api/data.json')->status, 200, 'request 1 of 2: 200');
    is(get('shape', '/api/data.json')->status, 200, 'request 2 of 2: 200');
    my $r = get('shape', '/api/data.json');
    my $after = now_ms();
    is($r->status, 429, 'request 3 over the limit: 429');

    # 429 shape: JSON, Retry-After, rate-limit headers, challenge headers

    like($r->header('Content-Type'), qr{^application/json\b},
        '429: Content-Type application/json');
    my $ra = $r->header('Retry-After');
    like($ra, qr/^\d+$/, '429: Retry-After is an integer');
    ok($ra >= 1, '429: Retry-After >= 1');
    ok($ra >= 3595 && $ra <= 3601,
        '429: Retry-After is the time until a slot frees (the oldest of 2 leaves an hour after it came)')
        or diag("Retry-After: $ra");
    is($r->header('X-RateLimit-Limit'), 2, '429: X-RateLimit-Limit');
    is($r->header('X-RateLimit-Remaining'), 0, '429: X-RateLimit-Remaining 0');
    like($r->header('X-RateLimit-Reset'), qr/^\d+$/, '429: X-RateLimit-Reset');
    is($r->header('X-PoW-Difficulty'), 1, '429: X-PoW-Difficulty is configured 1');
    is($r->header('X-Result'), 'challenge', '429: $pow_shield_result challenge');

    my $j = $r->json;
    ok($j, '429: body is JSON') or diag($r->body);
    $j ||= {};
    is($j->{error}, 'PoW challenge required', '429: error text');
    is($j->{challenge}, $r->header('X-PoW-Challenge'),
        '429: body challenge equals X-PoW-Challenge');
    is($j->{difficulty}, 1, '429: body difficulty');
    like($r->body, qr/"difficulty"\s*:\s*1\b/, '429: difficulty is a JSON number');
    is($j->{algorithm}, 'sha256', '429: algorithm sha256');
    is($j->{expires_in}, 30, '429: expires_in is the challenge TTL (30s)');
    like($r->body, qr/"expires_in"\s*:\s*30\b/, '429: expires_in is a JSON number');
    ok(defined $j->{instructions} && !ref $j->{instructions}
        && length $j->{instructions}, '429: instructions text');
    like($j->{salt}, qr/^[0-9a-f]{32,}$/, '429: salt is >= 16 bytes of hex');

    # token: base64url(payload) "." base64url(HMAC-SHA256(key, payload_b64))

    my $token = $r->header('X-PoW-Challenge') // '';
    like($token, qr/^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$/,
        'token is base64url "." base64url, no padding');
    my $tok = decode_token($token) || {};
    my $p = $tok->{payload} || {};
    is($p->{ip}, '127.0.0.1', 'payload ip is $remote_addr');
    like($p->{ts}, qr/^\d+$/, 'payload ts is an integer');
    ok($p->{ts} >= $before - 1000 && $p->{ts} <= $after + 1000,
        'payload ts is the issue time in epoch milliseconds')
        or diag("ts $p->{ts} not in [$before, $after]");
    is($p->{difficulty}, 1, 'payload difficulty');
    is($p->{salt}, $j->{salt}, 'payload salt is the body salt');
    is($tok->{mac_b64}, sign($SECRET, $tok->{payload_b64} // ''),
        'MAC is HMAC-SHA256 of the encoded payload with pow_shield_secret');

    # every 429 issues a new challenge (stateless, random salt)

    my $r2 = get('shape', '/api/data.json');
    is($r2->status, 429, 'still over the limit: 429');
    isnt($r2->header('X-PoW-Challenge'), $token, 'a new challenge every time');
    isnt(($r2->json || {})->{salt}, $j->{salt}, 'a new salt every time');

    # a valid solution passes: the content is served

    my $nonce = solve_token($token);
    $r = with_solution('shape', '/api/data.json', $token, $nonce);
    is($r->status, 200, 'solved: 200');
    is($r->body, qq({"dir":"api"}\n), 'solved: content served');
    is($r->header('X-Result'), 'solved', 'solved: $pow_shield_result solved');
    is($r->header('X-RateLimit-Remaining'), 0, 'solved: rate-limit headers');
    ok(!$r->has_header('X-PoW-Challenge'), 'solved: no challenge header');

    # a solution admits one request: the next plain request is challenged again

    is(get('shape', '/api/data.json')->status, 429,
        'after a solved request the client is still over the limit');

    # replay: 409 "Challenge already spent" with a fresh challenge

    $r = with_solution('shape', '/api/data.json', $token, $nonce);
    is($r->status, 409, 'replayed solution: 409');
    like($r->header('Content-Type'), qr{^application/json\b}, '409: JSON');
    $j = $r->json || {};
    is($j->{error}, 'Challenge already spent', '409: error text');
    is($r->header('X-Result'), 'invalid', '409: $pow_shield_result invalid');

    my $fresh = $r->header('X-PoW-Challenge');
    ok($fresh, '409: fresh X-PoW-Challenge');
    isnt($fresh, $token, '409: the fresh challenge is a new token');
    is($r->header('X-PoW-Difficulty'), 1, '409: X-PoW-Difficulty');
    is($j->{challenge}, $fresh, '409: body challenge equals the header');
    is($j->{difficulty}, 1, '409: body difficulty');
    is($j->{algorithm}, 'sha256', '409: body algorithm');
    is($j->{expires_in}, 30, '409: body expires_in');
    is($j->{salt}, (decode_token($fresh // '') || {})->{payload}{salt},
        '409: body salt is the fresh token salt');

    # the fresh challenge from the 409 is solvable

    $r = with_solution('shape', '/api/data.json', $fresh, solve_token($fresh));
    is($r->status, 200, 'fresh challenge from 409 solved: 200');

    # clients are challenged independently

    $r = exhaust('other', '/api/data.json', 2);
    my $t2 = $r->header('X-PoW-Challenge');
    is(with_solution('other', '/api/data.json', $t2, solve_token($t2))->status,
        200, 'second client solves its challenge');

    # under the limit the PoW headers are ignored: the request just counts

    $r = with_solution('green', '/api/data.json', 'garbage', 'x');
    is($r->status, 200, 'under the limit, bogus PoW headers: 200');
    is($r->header('X-RateLimit-Remaining'), 1, 'under the limit: counted');
    is($r->header('X-Result'), 'pass', 'under the limit: result pass');

    $r = with_solution('green', '/api/data.json', $token, $nonce);
    is($r->status, 200, 'under the limit, spent token: 200 (not checked)');
    is($r->header('X-RateLimit-Remaining'), 0, 'under the limit: counted again');

    # difficulty follows the location: pow_shield_difficulty 2

    $r = exhaust('hard', '/hard/data.json', 1);
    is($r->status, 429, 'difficulty 2 location: 429');
    is($r->header('X-PoW-Difficulty'), 2, 'difficulty 2: X-PoW-Difficulty 2');
    is(($r->json || {})->{difficulty}, 2, 'difficulty 2: body difficulty 2');
    $token = $r->header('X-PoW-Challenge');
    is((decode_token($token) || {})->{payload}{difficulty}, 2,
        'difficulty 2: payload difficulty 2');
    is(with_solution('hard', '/hard/data.json', $token, solve_token($token))
        ->status, 200, 'difficulty 2: solved');

    # Retry-After is the time until the window takes one more request:
    # "pow_shield_limit 2 4s" frees a slot when the first request leaves, 4 s
    # after it came

    get('fast', '/fast/data.json') for 1 .. 2;
    $r = get('fast', '/fast/data.json');
    is($r->status, 429, 'limit 2 4s: third request is 429');
    my $retry = $r->header('Retry-After') // 0;
    ok($retry >= 3 && $retry <= 4, 'limit 2 4s: Retry-After is 3..4 s')
        or diag("Retry-After: $retry");
    select undef, undef, undef, $retry + 0.3;
    is(get('fast', '/fast/data.json')->status, 200,
        'after waiting Retry-After seconds the request passes');

    # Retry-After is at least 1 even when a slot frees in under a second
    # ("pow_shield_limit 10 1s": one slot every 100 ms)

    {
        my @rs = $t->http_pipeline([('/tiny/data.json') x 30], 'X-Client' => 'tiny');
        my @limited = grep { ($_->status // 0) == 429 } @rs;
        ok(@limited >= 1, 'limit 10 1s, 30 pipelined requests: some are 429');
        is(scalar(grep { ($_->header('Retry-After') // 0) < 1 } @limited), 0,
            'every 429 has Retry-After >= 1');
    }

    # "pow_shield_limit 3 1m": 3 pass, the 4th is 429, a slot frees a minute after
    # the first

    {
        my @rs = $t->http_pipeline([('/minute/data.json') x 4], 'X-Client' => 'minute');
        is(join(' ', map { $_->status // 'none' } @rs), '200 200 200 429',
            'limit 3 1m: three pass, the fourth is 429');
        my $ra = $rs[3]->header('Retry-After') // 0;
        ok($ra >= 59 && $ra <= 60, 'limit 3 1m: Retry-After 60 s')
            or diag("Retry-After: $ra");
        like($rs[3]->header('RateLimit') // '', qr/^"pow-shield";r=0;t=(59|60)$/,
            'limit 3 1m: RateLimit t=60 s until the oldest request leaves');
    }

    # HEAD over the limit: 429 with the challenge headers, no body

    get('head', '/api/data.json') for 1 .. 2;
    $r = $t->http_get('/api/data.json', 'X-Client' => 'head', -method => 'HEAD');
    is($r->status, 429, 'HEAD over the limit: 429');
    ok($r->header('X-PoW-Challenge'), 'HEAD: X-PoW-Challenge');
    is($r->body, '', 'HEAD: no body');

    # pow_shield_headers off: the 429 keeps Retry-After and the challenge, but
    # no rate-limit headers; variables are set

    get('bare', '/bare/data.json');
    $r = get('bare', '/bare/data.json');
    is($r->status, 429, 'headers off: 429');
    ok($r->has_header('Retry-After'), 'headers off: Retry-After kept');
    ok($r->has_header('X-PoW-Challenge'), 'headers off: X-PoW-Challenge kept');
    ok(!$r->has_header('X-RateLimit-Limit') && !$r->has_header('RateLimit'),
        'headers off: no rate-limit headers on the 429');
    is($r->header('X-Vars'), 'challenge 0 1',
        '429: $pow_shield_result, $pow_shield_remaining, $pow_shield_difficulty');

    # a 429 on a keep-alive connection discards the request body: a body that
    # looks like a request is never run as one

    {
        my $evil = "GET /api/evil.json HTTP/1.1\r\nHost: localhost\r\n\r\n";
        my $req = '';
        for (1 .. 3) {
            $req .= "POST /proxy/x HTTP/1.1\r\nHost: localhost\r\n"
                . "X-Client: body\r\nContent-Length: " . length($evil)
                . "\r\n\r\n$evil";
        }
        my $chunked = sprintf("%x\r\n%s\r\n0\r\n\r\n", length $evil, $evil);
        $req .= "POST /proxy/x HTTP/1.1\r\nHost: localhost\r\nX-Client: body\r\n"
            . "Transfer-Encoding: chunked\r\n\r\n$chunked";
        $req .= "GET /proxy/y HTTP/1.1\r\nHost: localhost\r\nX-Client: body2\r\n"
            . "Connection: close\r\n\r\n";
        my @rs = Test::PowShield::Response->split_stream($t->http($req)->raw);
        is(join(' ', map { $_->status // 'none' } @rs), '200 200 429 429 200',
            'keep-alive POSTs over the limit: 429s, then the next request');
        ok(!grep({ /evil/ } split /\n/, $t->read_file('access.log')),
            'request bodies were discarded, not parsed as requests');
    }

    # over the limit with a request body nginx cannot read (broken chunked
    # encoding): nginx's own 400, not a dropped connection

    {
        get('badbody', '/proxy/x') for 1 .. 2;
        my $r = $t->http("POST /proxy/x HTTP/1.1\r\nHost: localhost\r\n"
            . "X-Client: badbody\r\nTransfer-Encoding: chunked\r\n"
            . "Connection: close\r\n\r\nzz\r\nnot a chunk\r\n");
        is($r->status, 400, 'over the limit, broken chunked body: 400');
    }

    # rejections are logged, one line each, naming the client address, at
    # pow_shield_log_level (default warn)

    ok(scalar $t->error_log_lines(
            qr{\[warn\].*127\.0\.0\.1.*"GET /api/data\.json}),
        'challenge logged at warn with the client address');

    exhaust('quiet', '/quiet/data.json', 1);
    ok(scalar $t->error_log_lines(
            qr{\[error\].*127\.0\.0\.1.*"GET /quiet/data\.json}),
        'pow_shield_log_level error: logged at [error]');
    ok(!$t->error_log_lines(qr{\[warn\].*"GET /quiet/data\.json}),
        'pow_shield_log_level error: not at [warn]');

    # exactly one log line per rejected request

    get('once', '/quiet/data.json?once');
    get('once', '/quiet/data.json?once');
    is($t->error_log_count(qr{pow_shield.*"GET /quiet/data\.json\?once }), 1,
        'one log line for one rejected request');
});

###############################################################################

Test::PowShield::Modes->done_testing;
