#!/usr/bin/perl

# Key rotation (docs/directives.md, pow_shield_secret_file): the file holds the
# current key, then optionally the previous key, which is still accepted for
# verification.  Rotation is a file change plus a reload; the limiter state
# survives the reload, so clients stay over their limit across it.
#
# In local mode and in cluster mode (Test::PowShield::Modes each_mode).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Test::PowShield qw(:pow http_conf);
use Test::PowShield::Modes;

###############################################################################

my $OLD = 'old-key-0123456789abcdef0123456789';
my $NEW = 'new-key-0123456789abcdef0123456789';
my $NEWER = 'newer-key-0123456789abcdef01234567';
my $UNKNOWN = 'unknown-key-0123456789abcdef012345';

my $t;    # the node of the mode under test (each_mode below)

my $conf = http_conf(<<'EOF');
    %%REDIS%%
    pow_shield_secret_file %%TESTDIR%%/secret.txt;

    server {
        %%TEST_SERVER%%

        location /api/ {
            pow_shield_limit 1 1h;
            pow_shield_difficulty 1;
            pow_shield_key $http_x_client;
        }
    }
EOF

my %files = ('secret.txt' => "$OLD\n", 'html/api/data.json' => qq({"ok":true}\n));

###############################################################################

sub get {
    my ($client, %h) = @_;
    return $t->http_get('/api/data.json', 'X-Client' => $client, %h);
}

sub with_solution {
    my ($client, $token) = @_;
    my $p = (decode_token($token // '') || {})->{payload} || {};
    return get($client, 'X-PoW-Challenge' => $token,
        'X-PoW-Nonce' => solve($p->{salt} // '', $p->{difficulty} // 1));
}

sub signed_with {
    my ($token, $key) = @_;
    my $tok = decode_token($token // '') or return 0;
    return $tok->{mac_b64} eq sign($key, $tok->{payload_b64});
}

sub forged {
    my ($key) = @_;
    return forge_token($key, { ip => '127.0.0.1', ts => now_ms(),
        difficulty => 1, salt => sprintf('%032x', int rand 2**31) });
}

###############################################################################

Test::PowShield::Modes->each_mode($conf, redis => 'timeout=3s', files => \%files, sub {
    my ($m) = @_;
    $t = $m->node(1);

    # a one-line file: the current key signs challenges

    is(get('a')->status, 200, 'client a: first request passes');
    my $r = get('a');
    is($r->status, 429, 'client a: over the limit');
    my $from_old = $r->header('X-PoW-Challenge');
    ok(signed_with($from_old, $OLD), 'challenge signed with the only key');

    is(get('b')->status, 200, 'client b: first request passes');
    is(get('c')->status, 200, 'client c: first request passes');
    is(get('d')->status, 200, 'client d: first request passes');

    # rotate: new key first, old key second; reload

    $t->write_file('secret.txt', "$NEW\n$OLD\n");
    ok($t->reload, 'reload after rotation');

    is(get('b')->status, 429, 'limiter state survived the reload');

    # a challenge issued before the rotation is still accepted

    is(with_solution('a', $from_old)->status, 200,
        'challenge signed with the previous key: accepted');

    # new challenges are signed with the new key

    $r = get('a');
    is($r->status, 429, 'client a: challenged again');
    my $from_new = $r->header('X-PoW-Challenge');
    ok(signed_with($from_new, $NEW), 'new challenge signed with the new key');
    ok(!signed_with($from_new, $OLD), 'new challenge not signed with the old key');
    is(with_solution('a', $from_new)->status, 200,
        'challenge signed with the new key: accepted');

    # tokens signed with either configured key verify; others do not

    is(with_solution('b', forged($OLD))->status, 200,
        'token signed with the previous key: 200');
    is(with_solution('b', forged($NEW))->status, 200,
        'token signed with the current key: 200');
    $r = with_solution('b', forged($UNKNOWN));
    is($r->status, 403, 'token signed with an unknown key: 403');
    is(($r->json || {})->{error}, 'Invalid challenge signature',
        'unknown key: "Invalid challenge signature"');

    # a second rotation drops the oldest key

    $t->write_file('secret.txt', "$NEWER\n$NEW\n");
    ok($t->reload, 'reload after the second rotation');

    $r = with_solution('c', forged($OLD));
    is($r->status, 403, 'key rotated out: 403');
    is(($r->json || {})->{error}, 'Invalid challenge signature',
        'key rotated out: "Invalid challenge signature"');
    is(with_solution('c', forged($NEW))->status, 200,
        'previous key after the second rotation: 200');
    is(with_solution('c', forged($NEWER))->status, 200,
        'current key after the second rotation: 200');

    # a key file edited on Windows: line ends "\r\n" are not part of the keys

    $t->write_file('secret.txt', "$NEWER\r\n$NEW\r\n");
    ok($t->reload, 'reload with CRLF line ends');
    get('e');
    is(with_solution('e', forged($NEWER))->status, 200,
        'CRLF key file: current key without "\r" verifies');
    is(with_solution('e', forged($NEW))->status, 200,
        'CRLF key file: previous key without "\r" verifies');

    # a bad key file on reload: nginx keeps the running configuration

    $t->allow_emerg;
    $t->write_file('secret.txt', "too-short\n");
    ok(!$t->reload(timeout => 3), 'reload with a short key is refused');
    like(join("\n", $t->error_log_lines(qr/\[emerg\]/)), qr/pow_shield_secret_file/,
        'refused reload names pow_shield_secret_file');
    is(with_solution('d', forged($NEWER))->status, 200,
        'old configuration still verifies with its current key');
});

###############################################################################

Test::PowShield::Modes->done_testing;
