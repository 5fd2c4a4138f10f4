#!/usr/bin/perl

# The module's JSON bodies are RFC 9457 problem details (docs/protocol.md
# §7): "type", "title", "status" and "detail", beside every field a client
# read before ("error", and a challenge's "challenge", "difficulty", "salt",
# "algorithm", "expires_in", "instructions"). Content-Type is
# application/problem+json when the request's Accept names it (q > 0),
# else application/json, the type clients always got.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Test::PowShield qw(:pow http_conf);

###############################################################################

my $t = Test::PowShield->new;

$t->write_file_expand('nginx.conf', http_conf(<<"EOF"));
    pow_shield_secret "problem-details-suite-secret-0123456789";
    # nothing listens there: the store is down from the start
    pow_shield_redis redis://127.0.0.1:%%PORT_8091%% timeout=200ms connect_timeout=200ms;

    server {
        %%TEST_SERVER%%

        pow_shield_key \$http_x_client;
        pow_shield_limit 1 1h;
        pow_shield_difficulty 1;
        pow_shield_strikes off;
        pow_shield_fail local;

        location /api/ { }

        location /closed/ {
            pow_shield_fail closed;
        }
    }
EOF

$t->write_file('html/api/data.json', qq({"ok":true}\n));
$t->write_file('html/closed/data.json', qq({"ok":true}\n));

$t->run;

###############################################################################

my $QUOTA = 'https://iana.org/assignments/http-problem-types#quota-exceeded';
my $CAPACITY =
    'https://iana.org/assignments/http-problem-types#temporary-reduced-capacity';

my $n = 0;

# a fresh client over its limit: its next request is challenged
sub over {
    my $c = 'client-' . ++$n;
    $t->http_get('/api/data.json', 'X-Client' => $c);
    return $c;
}

sub get {
    my ($c, %h) = @_;
    return $t->http_get(delete $h{uri} // '/api/data.json', 'X-Client' => $c, %h);
}

# a 429 is a quota-exceeded problem that keeps the challenge fields

my $r = get(over());
is($r->status, 429, '429 over the limit');
my $j = $r->json // {};
is($j->{type}, $QUOTA, '429: type is the draft\'s quota-exceeded');
is($j->{title}, 'PoW challenge required', '429: title');
is($j->{status}, 429, '429: status member is the HTTP status');
like($j->{detail} // '', qr/X-PoW-Challenge.*X-PoW-Nonce/, '429: detail says what to do');
is($j->{error}, 'PoW challenge required', '429: error kept');
is($j->{challenge}, $r->header('X-PoW-Challenge'), '429: challenge kept');
is_deeply([@$j{qw(difficulty algorithm expires_in)}], [1, 'sha256', 60],
    '429: difficulty, algorithm, expires_in kept');
like($j->{salt} // '', qr/^[0-9a-f]{32}$/, '429: salt kept');
like($j->{instructions} // '', qr/nonce/, '429: instructions kept');
like($r->body, qr/^\{"type":"[^"]+","title":"[^"]+","status":429,"detail":/,
    '429: the problem members come first, status a JSON number');

# Content-Type: what Accept asks for, application/json otherwise

my %accept = (
    '(none)'                                   => 'application/json',
    '*/*'                                      => 'application/json',
    'application/json'                         => 'application/json',
    'application/problem+json'                 => 'application/problem+json',
    'text/html, application/problem+json;q=0.5' => 'application/problem+json',
    'application/problem+json;q=0, */*'        => 'application/json',
);
for my $accept (sort keys %accept) {
    my %h = $accept eq '(none)' ? () : (Accept => $accept);
    $r = get(over(), %h);
    is($r->header('Content-Type'), $accept{$accept},
        "429, Accept $accept: $accept{$accept}");
}

# a refused solution: 422 with its own problem type and a fresh challenge

my $c = over();
my $token = get($c)->header('X-PoW-Challenge') // '';
my $p = decode_token($token)->{payload};
$r = get($c, 'X-PoW-Challenge' => $token,
    'X-PoW-Nonce' => wrong_nonce($p->{salt}, $p->{difficulty}),
    Accept => 'application/problem+json');
is($r->status, 422, 'wrong nonce: 422');
is($r->header('Content-Type'), 'application/problem+json',
    '422: problem+json when asked for');
$j = $r->json // {};
is_deeply([@$j{qw(type title status error)}],
    ['tag:pow-shield,2026:incorrect-solution', 'Incorrect PoW solution', 422,
        'Incorrect PoW solution'],
    '422: incorrect-solution problem, error kept');
is($j->{challenge}, $r->header('X-PoW-Challenge'), '422: fresh challenge kept');

# a malformed token: a 400 problem without challenge fields

$r = get(over(), 'X-PoW-Challenge' => 'abc', 'X-PoW-Nonce' => '1',
    Accept => 'application/problem+json');
is($r->status, 400, 'malformed token: 400');
is($r->header('Content-Type'), 'application/problem+json',
    '400: problem+json when asked for');
$j = $r->json // {};
is_deeply([@$j{qw(type title status error)}],
    ['tag:pow-shield,2026:malformed-challenge', 'Malformed challenge token', 400,
        'Malformed challenge token'],
    '400: malformed-challenge problem, error kept');
ok(!exists $j->{challenge}, '400: no challenge');

# the store is down and the location fails closed: 503, reduced capacity

$r = get('closed-client', uri => '/closed/data.json');
is($r->status, 503, 'store down, fail closed: 503');
is($r->header('Content-Type'), 'application/json', '503: application/json');
$j = $r->json // {};
is_deeply([@$j{qw(type title status error)}],
    [$CAPACITY, 'Rate limiter unavailable', 503, 'Rate limiter unavailable'],
    '503: temporary-reduced-capacity problem, error kept');
$r = get('closed-client', uri => '/closed/data.json',
    Accept => 'application/problem+json');
is($r->header('Content-Type'), 'application/problem+json',
    '503: problem+json when asked for');

done_testing;
