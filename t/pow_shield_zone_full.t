#!/usr/bin/perl

# A zone full of spent challenges (SPEC section 6): a spent record is never
# given up before its token expires.  Spending evicts buckets (LRU) until
# the zone holds only spent records; then what cannot be recorded, a new
# client's bucket or a solution, is refused with 503 and Retry-After, never
# let through.  Whatever the zone does, no token is accepted twice.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Test::PowShield qw(:pow);

###############################################################################

my $t = Test::PowShield->new;

$t->write_file_expand('nginx.conf', <<'EOF');
%%TEST_GLOBALS%%

worker_processes 2;

events {
}

http {
    %%TEST_GLOBALS_HTTP%%

    default_type application/json;

    pow_shield_secret "zone-full-suite-secret-0123456789abcdef";
    pow_shield_zone 32k;

    server {
        listen 127.0.0.1:%%PORT_8080%%;
        server_name localhost;

        root %%TESTDIR%%/html;

        location /api/ {
            pow_shield_limit 1 1d;
            pow_shield_difficulty 1;
            pow_shield_key $http_x_client;
        }
    }
}
EOF

$t->write_file('html/api/data.json', qq({"ok":true}\n));
$t->run;

###############################################################################

my $CLIENTS = 300;

sub get {
    my ($client, %h) = @_;
    return $t->http_get('/api/data.json', 'X-Client' => $client, %h);
}

# a solved challenge of $client, who is over the limit afterwards
sub solved {
    my ($client) = @_;
    get($client);
    my $token = get($client)->header('X-PoW-Challenge') // '';
    my $p = (decode_token($token) || {})->{payload} || {};
    return ('X-PoW-Challenge' => $token,
        'X-PoW-Nonce' => solve($p->{salt} // '', 1));
}

# 200s per token, over every use of it
my (%accepted, @solutions, @first);

sub use_token {
    my ($client, $sol) = @_;
    my $r = get($client, %$sol);
    $accepted{$sol->{'X-PoW-Challenge'}}++ if ($r->status // 0) == 200;
    return $r;
}

for my $i (1 .. $CLIENTS) {
    my %sol = solved("c$i");
    push @solutions, ["c$i", \%sol];
    push @first, use_token("c$i", \%sol);
}

my @refused = grep { ($_->status // 0) == 503 } @first;
ok(scalar(grep { ($_->status // 0) == 200 } @first),
    'solutions are accepted while the zone has room');
ok(@refused, "$CLIENTS solutions in a 32k zone: then requests get 503")
    or diag(join ' ', map { $_->status // 'none' } @first);

my $r = $refused[0] // get('none');
is(($r->json // {})->{error}, 'Rate limiter unavailable',
    '503 of a full zone: the store failure body');
like($r->header('Retry-After') // '', qr/^[1-9][0-9]*$/,
    '503 of a full zone: Retry-After');

# replay every solution, twice, each from a client over its limit (a
# forgotten bucket would otherwise pass the request without any token)

for my $round (1 .. 2) {
    for (@solutions) {
        my ($client, $sol) = @$_;
        get($client);
        use_token($client, $sol);
    }
}

my @twice = grep { $accepted{$_} > 1 } keys %accepted;
is(scalar @twice, 0, 'no solution is accepted twice, however full the zone');

ok(scalar $t->error_log_lines(qr/\[warn\].*is full of spent challenges: .*refused/),
    'refusals are logged at the log level');

###############################################################################

$t->done_testing;
