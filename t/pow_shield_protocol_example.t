#!/usr/bin/perl

# docs/protocol.md's examples agree with themselves and with the module:
# section 3's 429 carries a token whose payload is the one printed beside
# it, signed with section 10's test-vector key, with the exp and bits its
# body and headers give; the module, configured as the text says, writes
# a payload of the same fields in the same order, with the same pol and ck,
# and the same X-PoW-* headers; and a fresh challenge (section 7.2) has
# the headers the text lists, X-PoW-Bits among them.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Digest::SHA qw(hmac_sha256);
use Test::More;
use Test::PowShield qw(:pow :util);
use Test::PowShield::Examples qw(slurp);

###############################################################################

my $doc = slurp("$Test::PowShield::REPO/docs/protocol.md");
my ($s3) = $doc =~ /^## 3\. The challenge \(429\)\n(.*?)^## 4\./ms;
my ($example) = ($s3 // '') =~ /^```\n(HTTP\/1\.1 429 .*?)^```/ms;
ok($example, 'section 3: the example 429');
my ($head, $body) = split /\n\n/, $example // '', 2;
my %h = map { /^([\w-]+): (.*)$/ ? (lc $1 => $2) : () } split /\n/, $head // '';
my $json = json_decode($body // '{}');

my ($printed) = ($s3 // '') =~ /payload \(section 4\).*?^```\n(\{.*?\})\n```/ms;
ok($printed, 'section 3: the payload printed beside it');
my ($key) = $doc =~ /With the \d+-byte ASCII key `([^`]+)`/;
ok($key, "section 10: the test-vector key ($key)");

my $token = decode_token($h{'x-pow-challenge'});
is($token->{payload_text}, $printed, "the example token's payload is the one printed");
is($token->{mac_b64}, b64url_encode(hmac_sha256($token->{payload_b64}, $key)),
    '... signed with the test-vector key');
my $p = $token->{payload};
is($p->{bits}, $json->{bits}, "payload bits = body bits ($json->{bits})");
is($p->{bits}, $h{'x-pow-bits'}, '... = X-PoW-Bits');
is($p->{difficulty}, $json->{difficulty}, 'payload difficulty = body difficulty');
is($p->{difficulty}, $h{'x-pow-difficulty'}, '... = X-PoW-Difficulty');
is($p->{salt}, $json->{salt}, 'payload salt = body salt');
is(($p->{exp} - $p->{ts}) / 1000, $json->{expires_in}, 'exp - ts = expires_in');
like($json->{challenge}, qr/^\Q@{[substr($h{'x-pow-challenge'}, 0, 8)]}\E/,
    "the body's (abbreviated) challenge is the header's");

###############################################################################
# The module, as the text says it was configured

my ($limit) = ($s3 =~ /`(pow_shield_limit [^`;]+;)/);
my ($difficulty) = ($s3 =~ /`[^`]*(pow_shield_difficulty [^`;]+;)`/);
ok($limit && $difficulty, "the configuration named: $limit $difficulty");

my $t = Test::PowShield->new;
$t->write_file_expand('nginx.conf', http_conf(<<"EOF"));
    pow_shield_secret "$key";
    set_real_ip_from 127.0.0.1;
    real_ip_header X-Real-IP;

    server {
        %%TEST_SERVER%%

        location /api/ {
            $limit
            $difficulty
        }
    }
EOF
$t->write_file('html/api/data.json', '{"ok":true}');
$t->run;

my $ip = $p->{ip};
my $requests = $h{'x-ratelimit-limit'};
my @r = map { $t->http_get('/api/data.json', 'X-Real-IP' => $ip) } 1 .. $requests + 1;
my $r = $r[-1];
is($r->status, 429, "request " . ($requests + 1) . " from $ip: 429");
my $real = decode_token($r->header('X-PoW-Challenge'))->{payload_text} // '';
my @fields = $printed =~ /"(\w+)":/g;
is(join(' ', $real =~ /"(\w+)":/g), "@fields", "the module's payload: the same fields, in order");
my $q = json_decode($real);
is($q->{$_}, $p->{$_}, "... the same $_") for qw(ip difficulty bits pol ck st);
for my $name (grep { /^x-pow-/ } sort keys %h) {
    is($r->header($name) // '(none)', $name eq 'x-pow-challenge' ? $r->header($name) : $h{$name},
        "the module's 429 has $name" . ($name eq 'x-pow-challenge' ? '' : ": $h{$name}"));
}

# a fresh challenge: the 422 of a wrong nonce
my ($listed) = $doc =~ /"Fresh challenge" means the response has the (.*?) headers/s;
my @named = ($listed // '') =~ /`([\w-]+)`/g;
ok((grep { $_ eq 'X-PoW-Bits' } @named), "section 7.2 lists the headers: @named");
my $fresh = $t->http_get('/api/data.json', 'X-Real-IP' => $ip, solution($r, wrong => 1));
is($fresh->status, 422, 'a wrong nonce: 422');
ok(defined $fresh->header($_), "... with $_") for @named;
ok(!defined $fresh->header('Retry-After'), '... and no Retry-After');

$t->done_testing;
