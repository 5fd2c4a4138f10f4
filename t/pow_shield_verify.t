#!/usr/bin/perl

# Verification of solutions (docs/protocol.md §6): every row of
# the table, in its order, with tokens forged from the configured
# pow_shield_secret.  Verification only happens over the limit, so every
# test first spends the bucket of a fresh client (limit 1); a fresh client
# per test also keeps strikes (section 5) below the circuit breaker.
#
# Every assertion in local mode and in cluster mode (Test::PowShield::Modes
# each_mode: the zone, then a Redis of the suite's own).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Test::PowShield qw(:pow :redis http_conf);
use Test::PowShield::Modes;

###############################################################################

my $SECRET = 'verify-suite-secret-0123456789abcdef';
my $OTHER = 'some-other-secret-0123456789abcdefgh';
my $TTL = 30;

my $t;    # the node of the mode under test (each_mode below)

my $conf = http_conf(<<"EOF");
    %%REDIS%%
    pow_shield_secret "$SECRET";

    server {
        %%TEST_SERVER%%

        add_header X-Result \$pow_shield_result always;

        pow_shield_key \$http_x_client;
        pow_shield_limit 1 1h;
        pow_shield_challenge_ttl ${TTL}s;

        location /api/ {
            pow_shield_difficulty 1;
        }

        location /hard/ {
            pow_shield_difficulty 2;
        }

        location /short/ {
            pow_shield_difficulty 1;
            pow_shield_challenge_ttl 1s;
        }
    }

    # the client address as nginx sees it, after realip
    server {
        listen 127.0.0.1:%%PORT_8081%%;
        server_name localhost;

        root %%TESTDIR%%/html;

        set_real_ip_from 127.0.0.1;
        real_ip_header X-Real-IP;

        location /api/ {
            pow_shield_key \$http_x_client;
            pow_shield_limit 1 1h;
            pow_shield_difficulty 1;
        }
    }
EOF

my %files = map { ("html/$_/data.json" => qq({"ok":true}\n)) } qw(api hard short);

###############################################################################

my $n = 0;    # clients so far (client-1, client-2, ...), over both modes

# a fresh client already over its limit
sub client {
    my ($uri) = @_;
    my $c = 'client-' . ++$n;
    my $r = $t->http_get($uri // '/api/data.json', 'X-Client' => $c);
    die "first request of $c: " . ($r->status // 'none') unless
        ($r->status // 0) == 200;
    return $c;
}

sub salt { join '', map { sprintf '%02x', int rand 256 } 1 .. 16 }

# payload with the protocol's fields; overrides replace, undef removes
sub payload {
    my (%o) = @_;
    my %p = (ip => '127.0.0.1', ts => now_ms(), difficulty => 1,
        salt => salt());
    for (keys %o) {
        defined $o{$_} ? ($p{$_} = $o{$_}) : delete $p{$_};
    }
    return \%p;
}

sub send_pow {
    my ($client, %h) = @_;
    my $uri = delete $h{uri} // '/api/data.json';
    return $t->http_get($uri, 'X-Client' => $client, %h);
}

# send token + nonce as a fresh over-limit client
sub try {
    my ($token, $nonce, $uri) = @_;
    my $c = client($uri);
    return send_pow($c, uri => $uri, 'X-PoW-Challenge' => $token,
        'X-PoW-Nonce' => $nonce);
}

sub good_nonce { my ($p) = @_; solve($p->{salt}, $p->{difficulty}) }
sub bad_nonce  { my ($p) = @_; wrong_nonce($p->{salt}, $p->{difficulty}) }

# status and its RFC 9457 problem details: "error" (the text clients read
# since the first version) and "title" are the row's text, "status" the
# status, "type" pow-shield's tag: URI for it, "detail" what to do
sub rejected {
    my ($r, $status, $text, $name) = @_;
    my $ok = is($r->status, $status, "$name: $status");
    my $j = $r->json || {};
    is($j->{error}, $text, "$name: \"$text\"")
        or diag($r->head_text . "\n\n" . ($r->body // ''));
    is($j->{title}, $text, "$name: problem title is the error text");
    is($j->{status}, $status, "$name: problem status $status");
    like($j->{type} // '', qr/^tag:pow-shield,2026:[a-z-]+$/,
        "$name: problem type");
    like($j->{detail} // '', qr/\S/, "$name: problem detail");
    # our own 4xx are shielded responses too: JSON and rate-limit headers
    like($r->header('Content-Type') // '', qr{^application/json\b},
        "$name: JSON");
    is($r->header('X-RateLimit-Remaining'), 0,
        "$name: X-RateLimit-Remaining 0");
    return $ok;
}

# 409, 410 and 422 carry a fresh challenge in the headers and the JSON
sub fresh_challenge {
    my ($r, $name, $difficulty) = @_;
    my $token = $r->header('X-PoW-Challenge');
    my $j = $r->json || {};
    ok($token, "$name: fresh X-PoW-Challenge");
    is($r->header('X-PoW-Difficulty'), $difficulty,
        "$name: X-PoW-Difficulty $difficulty");
    is($j->{challenge}, $token, "$name: JSON challenge is the fresh token");
    is($j->{difficulty}, $difficulty, "$name: JSON difficulty");
    is($j->{salt}, (decode_token($token // '') || {})->{payload}{salt},
        "$name: JSON salt of the fresh token");
    is($j->{algorithm}, 'sha256', "$name: JSON algorithm");
    is($j->{expires_in}, $TTL, "$name: JSON expires_in");
    is(((decode_token($token // '') || {})->{mac_b64}),
        sign($SECRET, (decode_token($token // '') || {})->{payload_b64} // ''),
        "$name: fresh token signed with the current key");
}

###############################################################################

Test::PowShield::Modes->each_mode($conf, redis => 'timeout=3s', files => \%files, sub {
    my ($m) = @_;
    $t = $m->node(1);

    my ($p, $r);

    # a correctly forged token passes (the suite's baseline)

    $p = payload();
    $r = try(forge_token($SECRET, $p), good_nonce($p));
    is($r->status, 200, 'forged valid token: 200');
    is($r->header('X-Result'), 'solved', 'forged valid token: result solved');

    # row 1: only one of the two headers, or token not a.b -> 400

    $p = payload();
    my $c = client();
    rejected(send_pow($c, 'X-PoW-Challenge' => forge_token($SECRET, $p)),
        400, 'Malformed challenge token', 'challenge without nonce');
    rejected(send_pow(client(), 'X-PoW-Nonce' => '12345'),
        400, 'Malformed challenge token', 'nonce without challenge');
    rejected(try('abcdef', '1'), 400, 'Malformed challenge token',
        'token without a dot');
    rejected(try(forge_token($SECRET, $p) . '.abc', good_nonce($p)), 400,
        'Malformed challenge token', 'token with two dots');
    $r = try('abc', '1');
    is($r->header('X-Result'), 'invalid', 'malformed: result invalid');
    like($r->header('Content-Type'), qr{^application/json\b},
        'malformed: JSON error body');

    # row 2: MAC mismatch (current or previous key) -> 403

    $p = payload();
    rejected(try(forge_token($OTHER, $p), good_nonce($p)), 403,
        'Invalid challenge signature', 'token signed with an unknown key');

    {
        my ($pb, $mac) = split /\./, forge_token($SECRET, $p);
        my $tampered = b64url_encode(json_encode({ %$p, difficulty => 0 }));
        rejected(try("$tampered.$mac", good_nonce($p)), 403,
            'Invalid challenge signature', 'payload changed, MAC kept');
        rejected(try("$pb." . substr($mac, 0, -2), good_nonce($p)), 403,
            'Invalid challenge signature', 'truncated MAC');
        my $flipped = $mac;
        substr($flipped, 5, 1) = substr($flipped, 5, 1) eq 'A' ? 'B' : 'A';
        rejected(try("$pb.$flipped", good_nonce($p)), 403,
            'Invalid challenge signature', 'one MAC character changed');
    }

    # a solution admits exactly one request: encodings of the same MAC that a
    # lenient base64 decoder would accept (unused low bits of the last
    # character, padding) are not new tokens

    {
        $p = payload();
        my $token = forge_token($SECRET, $p);
        my ($pb, $mac) = split /\./, $token;
        my @alphabet = ('A' .. 'Z', 'a' .. 'z', '0' .. '9', '-', '_');
        my %index;
        @index{@alphabet} = 0 .. 63;
        my $last = $index{substr $mac, -1};
        for my $bits (1 .. 3) {
            my $variant = substr($mac, 0, -1) . $alphabet[($last & ~3) | ($bits ^ ($last & 3))];
            rejected(try("$pb.$variant", good_nonce($p)), 403,
                'Invalid challenge signature',
                "MAC with other unused low bits ($bits)");
        }
        rejected(try("$pb.$mac=", good_nonce($p)), 403,
            'Invalid challenge signature', 'MAC with "=" padding');
    }

    # row 3: payload not base64url JSON with the protocol's fields -> 400

    rejected(try(forge_token_raw($SECRET, 'not json'), '1'), 400,
        'Invalid payload encoding', 'payload is not JSON');
    rejected(try(forge_token_raw($SECRET, '[1,2,3]'), '1'), 400,
        'Invalid payload encoding', 'payload is a JSON array');
    for my $field (qw(ip ts difficulty salt)) {
        $p = payload($field => undef);
        rejected(try(forge_token($SECRET, $p), '1'), 400,
            'Invalid payload encoding', "payload without \"$field\"");
    }
    $p = payload();
    rejected(try(forge_token_raw($SECRET, json_encode({ %$p, ts => "$p->{ts}x" })),
            '1'), 400, 'Invalid payload encoding', 'payload ts is a string');
    $p = payload();
    rejected(try(forge_token_raw($SECRET,
                json_encode({ %$p, ts => 1.5 * $p->{ts} / 1.5 + 0.5 })), '1'),
        400, 'Invalid payload encoding', 'payload ts is not an integer');
    rejected(try(forge_token($SECRET, payload(ip => 2130706433)), '1'), 400,
        'Invalid payload encoding', 'payload ip is a number');
    rejected(try(forge_token($SECRET, payload(difficulty => '1')), '1'), 400,
        'Invalid payload encoding', 'payload difficulty is a string');

    # the payload has "at least" the protocol's fields: extra fields are fine

    $p = payload(v => 1, note => 'extra');
    is(try(forge_token($SECRET, $p), good_nonce($p))->status, 200,
        'payload with extra fields: 200');

    {
        # valid a.b shape, MAC right, but "a" is not decodable base64url
        my $pb = 'AAAAA';
        rejected(try("$pb." . sign($SECRET, $pb), '1'), 400,
            'Invalid payload encoding', 'payload is not base64url');
    }

    # row 4: ip differs from the client address -> 403

    $p = payload(ip => '10.1.2.3');
    rejected(try(forge_token($SECRET, $p), good_nonce($p)), 403,
        'Challenge was not issued for this IP', 'token issued for 10.1.2.3');

    # row 5: older than the TTL, or more than 5 s in the future -> 410

    $p = payload(ts => now_ms() - ($TTL + 5) * 1000);
    $r = try(forge_token($SECRET, $p), good_nonce($p));
    rejected($r, 410, 'Challenge expired', "token older than the TTL ($TTL s)");
    fresh_challenge($r, '410', 1);

    $p = payload(ts => now_ms() + 60_000);
    rejected(try(forge_token($SECRET, $p), good_nonce($p)), 410,
        'Challenge expired', 'token 60 s in the future');

    $p = payload(ts => now_ms() - ($TTL - 10) * 1000);
    is(try(forge_token($SECRET, $p), good_nonce($p))->status, 200,
        'token within the TTL: 200');

    $p = payload(ts => now_ms() + 3000);
    is(try(forge_token($SECRET, $p), good_nonce($p))->status, 200,
        'token 3 s in the future (clock skew under 5 s): 200');

    $p = payload(ts => int(now_ms() / 1000));
    rejected(try(forge_token($SECRET, $p), good_nonce($p)), 410,
        'Challenge expired', 'ts in seconds, not milliseconds: expired');

    # row 6: nonce not digits, or the hash lacks the zeros -> 422

    $p = payload();
    $r = try(forge_token($SECRET, $p), bad_nonce($p));
    rejected($r, 422, 'Incorrect PoW solution', 'nonce does not solve');
    is($r->reason, 'Unprocessable Content',
        '422 has its RFC 9110 reason phrase (nginx has none of its own)');
    fresh_challenge($r, '422', 1);
    is($r->header('X-Result'), 'invalid', '422: result invalid');

    for my $nonce ('abc', '12a', '-1', '+1', '1 2', '1.0', '0x1') {
        $p = payload();
        rejected(try(forge_token($SECRET, $p), $nonce), 422,
            'Incorrect PoW solution', "nonce \"$nonce\" is not digits");
    }

    {
        # at most 20 digits: a 20-digit solution passes, a 21-digit one fails
        my $long = sub {
            my ($salt, $digits) = @_;
            for (my $i = 0; ; $i++) {
                my $nonce = '1' . ('0' x ($digits - 7)) . sprintf('%06d', $i);
                return $nonce if hash_ok($salt, $nonce, 1);
            }
        };
        $p = payload();
        is(try(forge_token($SECRET, $p), $long->($p->{salt}, 20))->status, 200,
            '20-digit nonce that solves: 200');
        $p = payload();
        rejected(try(forge_token($SECRET, $p), $long->($p->{salt}, 21)), 422,
            'Incorrect PoW solution', '21-digit nonce (more than 20 digits)');
    }

    # the nonce is hashed as sent: leading zeros are part of it

    {
        $p = payload();
        my $nonce;
        for (my $i = 0; !$nonce; $i++) {
            $nonce = "00$i" if hash_ok($p->{salt}, "00$i", 1)
                && !hash_ok($p->{salt}, $i, 1);
        }
        is(try(forge_token($SECRET, $p), $nonce)->status, 200,
            "nonce with leading zeros (\"$nonce\"), hashed as sent: 200");
    }

    # 20 digits may exceed 64 bits: the nonce is text, not a machine integer

    {
        $p = payload();
        my $nonce;
        for (my $i = 0; !$nonce; $i++) {
            my $n = '99999999999' . sprintf('%09d', $i);
            $nonce = $n if hash_ok($p->{salt}, $n, 1);
        }
        is(try(forge_token($SECRET, $p), $nonce)->status, 200,
            "20-digit nonce above 2^64 ($nonce): 200");
    }

    # header names are case-insensitive

    $p = payload();
    is(send_pow(client(), 'x-pow-challenge' => forge_token($SECRET, $p),
            'x-pow-nonce' => good_nonce($p))->status, 200,
        'lower-case x-pow-challenge / x-pow-nonce: 200');

    # a huge token is refused cheaply

    rejected(try(('A' x 8000) . '.' . ('B' x 43), '1'), 403,
        'Invalid challenge signature', '8000-byte token');

    # a real challenge expires after pow_shield_challenge_ttl (1s)

    {
        my $c = client('/short/data.json');
        my $r = send_pow($c, uri => '/short/data.json');
        is($r->status, 429, 'ttl 1s: 429');
        is(($r->json || {})->{expires_in}, 1, 'ttl 1s: expires_in 1');
        my $token = $r->header('X-PoW-Challenge');
        my $p = (decode_token($token // '') || {})->{payload} || {};
        select undef, undef, undef, 2.2;
        $r = send_pow($c, uri => '/short/data.json', 'X-PoW-Challenge' => $token,
            'X-PoW-Nonce' => solve($p->{salt} // '', 1));
        rejected($r, 410, 'Challenge expired', 'real challenge after its TTL');
    }

    # ip is $remote_addr after realip

    {
        my $get = sub {
            my ($c, $ip, %h) = @_;
            return $t->http_get('/api/data.json', -port => 8081,
                'X-Client' => $c, 'X-Real-IP' => $ip, %h);
        };
        is($get->('realip', '10.9.8.7')->status, 200, 'realip: first request');
        my $r = $get->('realip', '10.9.8.7');
        is($r->status, 429, 'realip: 429');
        my $token = $r->header('X-PoW-Challenge');
        my $p = (decode_token($token // '') || {})->{payload} || {};
        is($p->{ip}, '10.9.8.7', 'realip: token ip is the real client address');
        rejected($get->('realip', '10.9.8.6', 'X-PoW-Challenge' => $token,
                'X-PoW-Nonce' => solve($p->{salt} // '', 1)), 403,
            'Challenge was not issued for this IP', 'realip: other address');
        is($get->('realip', '10.9.8.7', 'X-PoW-Challenge' => $token,
                'X-PoW-Nonce' => solve($p->{salt} // '', 1))->status, 200,
            'realip: same address: 200');
    }

    # a token issued with difficulty d needs max(d, current difficulty)

    $p = payload(difficulty => 1);
    rejected(try(forge_token($SECRET, $p), solve($p->{salt}, 1, exact => 1),
            '/hard/data.json'), 422, 'Incorrect PoW solution',
        'token difficulty 1 at a difficulty 2 location: 1 zero is not enough');
    $p = payload(difficulty => 1);
    is(try(forge_token($SECRET, $p), solve($p->{salt}, 2), '/hard/data.json')
        ->status, 200, 'token difficulty 1 at a difficulty 2 location: 2 zeros');
    $p = payload(difficulty => 3);
    rejected(try(forge_token($SECRET, $p), solve($p->{salt}, 2, exact => 1),
            '/hard/data.json'), 422, 'Incorrect PoW solution',
        'token difficulty 3 at a difficulty 2 location: 2 zeros are not enough');
    $p = payload(difficulty => 3);
    is(try(forge_token($SECRET, $p), solve($p->{salt}, 3), '/hard/data.json')
        ->status, 200, 'token difficulty 3: 3 zeros pass');

    # row 7: token already spent -> 409

    $p = payload();
    my $token = forge_token($SECRET, $p);
    $c = client();
    is(send_pow($c, 'X-PoW-Challenge' => $token, 'X-PoW-Nonce' => good_nonce($p))
        ->status, 200, 'first use of a token: 200');
    $r = send_pow($c, 'X-PoW-Challenge' => $token,
        'X-PoW-Nonce' => good_nonce($p));
    rejected($r, 409, 'Challenge already spent', 'second use of a token');
    fresh_challenge($r, '409', 1);

    # a spent token is spent for every client key (the token is the key)

    rejected(try($token, good_nonce($p)), 409, 'Challenge already spent',
        'spent token from another client key');

    # another nonce for a spent token is still a replay

    {
        my $other;
        for (my $i = good_nonce($p) + 1; !$other; $i++) {
            $other = "$i" if hash_ok($p->{salt}, $i, 1);
        }
        rejected(try($token, $other), 409, 'Challenge already spent',
            'spent token with a different valid nonce');
    }

    # the order of the checks

    $p = payload();
    rejected(try(forge_token_raw($OTHER, 'not json'), '1'), 403,
        'Invalid challenge signature', 'bad MAC before bad payload');
    $p = payload(ip => '10.1.2.3');
    rejected(try(forge_token($OTHER, $p), good_nonce($p)), 403,
        'Invalid challenge signature', 'bad MAC before wrong ip');
    $p = payload(ip => '10.1.2.3', ts => now_ms() - 3_600_000);
    rejected(try(forge_token($SECRET, $p), good_nonce($p)), 403,
        'Challenge was not issued for this IP', 'wrong ip before expiry');
    $p = payload(ts => now_ms() - 3_600_000);
    rejected(try(forge_token($SECRET, $p), 'abc'), 410, 'Challenge expired',
        'expiry before the nonce');
    $p = payload(ip => '10.1.2.3');
    rejected(try(forge_token_raw($SECRET, 'not json'), bad_nonce($p)), 400,
        'Invalid payload encoding', 'bad payload before the nonce');

    # the hash is checked before the replay store: a wrong answer does not burn
    # the challenge, and a spent token with a wrong answer is 422, not 409

    $p = payload();
    $token = forge_token($SECRET, $p);
    $c = client();
    rejected(send_pow($c, 'X-PoW-Challenge' => $token,
            'X-PoW-Nonce' => bad_nonce($p)), 422, 'Incorrect PoW solution',
        'wrong nonce first');
    is($m->redis->cmd('EXISTS', spent_key($token)), 0,
        'wrong nonce: nothing written to Redis') if $m->cluster;
    is(send_pow($c, 'X-PoW-Challenge' => $token,
            'X-PoW-Nonce' => good_nonce($p))->status, 200,
        'the same token with the right nonce still passes (not burned)');
    if ($m->cluster) {
        is($m->redis->cmd('EXISTS', spent_key($token)), 1,
            'the solution is spent in Redis');
        is($m->redis->cmd('ZCARD', client_key($c, 'w', 1, 3600000)), 1,
            'a solved request does not add to the window in Redis');
    }
    rejected(send_pow(client(), 'X-PoW-Challenge' => $token,
            'X-PoW-Nonce' => bad_nonce($p)), 422, 'Incorrect PoW solution',
        'spent token with a wrong nonce: 422 before 409');

    # the module's own challenge verifies the same way (no forging)

    $c = client();
    $r = send_pow($c);
    is($r->status, 429, 'real challenge: 429');
    $token = $r->header('X-PoW-Challenge');
    $p = (decode_token($token) || {})->{payload} || {};
    rejected(send_pow($c, 'X-PoW-Challenge' => $token,
            'X-PoW-Nonce' => wrong_nonce($p->{salt}, 1)), 422,
        'Incorrect PoW solution', 'real challenge, wrong nonce');
    is(send_pow($c, 'X-PoW-Challenge' => $token,
            'X-PoW-Nonce' => solve($p->{salt}, 1))->status, 200,
        'real challenge, right nonce: 200');
});

###############################################################################

Test::PowShield::Modes->done_testing;
