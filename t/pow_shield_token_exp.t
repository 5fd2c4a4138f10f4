#!/usr/bin/perl

# A spent solution never passes again, whatever the nodes' TTLs
# (docs/protocol.md 4): the token carries a signed exp; it is accepted
# until then and its spent record kept until then plus 5 s, never by the
# verifying node's pow_shield_challenge_ttl.
#  - two nodes on one Redis, TTLs 1 s and 60 s: a token spent at the 1 s
#    node is refused at the 60 s node 7 s later (its record gone by then);
#  - a reload that raises the TTL from 1 s to 60 s revives no spent token;
#  - a token issued by the 60 s node is accepted by the 1 s node after 2 s;
#  - a token without exp (a node that predates it) keeps working for the
#    verifying node's TTL.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Test::PowShield qw(:pow :util);
use Time::HiRes qw(sleep);

###############################################################################

my $SECRET = 'token-exp-suite-secret-0123456789abcdef';

my $conf = http_conf(<<'EOF');
    pow_shield_secret "SECRET";
    REDIS

    server {
        %%TEST_SERVER%%

        pow_shield_key $http_x_client;
        pow_shield_difficulty 1;
        pow_shield_limit 1 1d;
        pow_shield_challenge_ttl TTL;
    }
EOF

sub config {
    my ($ttl, $redis) = @_;
    (my $c = $conf) =~ s/TTL/$ttl/;
    $c =~ s/SECRET/$SECRET/;
    $c =~ s{REDIS}{$redis ? 'pow_shield_redis redis://127.0.0.1:%%REDIS_PORT%%;' : ''}e;
    return $c;
}

my $short = Test::PowShield->new->require_redis;
$short->run_redis;
my $long = Test::PowShield->new->use_redis($short->redis);
my $local = Test::PowShield->new;

$short->write_file_expand('nginx.conf', config('1s', 1));
$long->write_file_expand('nginx.conf', config('60s', 1));
$local->write_file_expand('nginx.conf', config('1s', 0));
for my $t ($short, $long, $local) {
    $t->write_file('html/data.json', qq({"ok":true}\n));
    $t->run;
}

###############################################################################

sub get {
    my ($t, $client, %h) = @_;
    return $t->http_get('/data.json', 'X-Client' => $client, %h);
}

# Over the limit at $t: a challenge, its solution spent there.
sub spend {
    my ($t, $client) = @_;
    get($t, $client);
    my $c = get($t, $client);
    is($c->status, 429, "$client: a challenge");
    my $exp = (decode_token($c->header('X-PoW-Challenge')) || {})->{payload}{exp};
    my %sol = solution($c);
    is(get($t, $client, %sol)->status, 200, "$client: spent");
    return ($exp, %sol);
}

my ($exp, %two_nodes) = spend($short, 'two-nodes');
my $p = (decode_token($two_nodes{'X-PoW-Challenge'}) || {})->{payload} || {};
is($exp, $p->{ts} + 1000, 'the token carries exp = ts + the 1 s TTL');

my (undef, %reloaded) = spend($local, 'reloaded');
$local->write_file_expand('nginx.conf', config('60s', 0));
ok($local->reload, 'local: reloaded with pow_shield_challenge_ttl 60s');

# a token of the 60 s node, to be paid at the 1 s node after 2 s
get($long, 'slow-payer');
my $from_long = get($long, 'slow-payer');
is($from_long->status, 429, 'a challenge from the 60 s node');

# A token without exp, as a node that predates it signs them.
get($long, 'old-node');
my $c = get($long, 'old-node');
my $old = (decode_token($c->header('X-PoW-Challenge')) || {})->{payload};
delete $old->{exp};
my $no_exp = forge_token($SECRET, $old);

sleep 2;

is(get($short, 'slow-payer', solution($from_long))->status, 200,
    'the 1 s node accepts a 60 s token after 2 s: acceptance comes from exp');
my %old = ('X-PoW-Challenge' => $no_exp, 'X-PoW-Nonce' => solve($old->{salt}, 1));
is(get($long, 'old-node', %old)->status, 200,
    'a token without exp is accepted for the 60 s TTL of the node');
is(get($long, 'old-node', %old)->status, 409, '... once');
is(get($short, 'old-node', %old)->status, 410,
    '... and by the 1 s TTL at the 1 s node');

sleep 5;

# 7 s after the spend: past exp + 5 s, the spent record is gone
is(get($long, 'two-nodes', %two_nodes)->status, 410,
    'spent at the 1 s node, replayed at the 60 s node 7 s later: 410, never 200');
is(get($local, 'reloaded', %reloaded)->status, 410,
    'spent at 1 s, replayed after a reload to 60 s, 7 s later: 410, never 200');

###############################################################################

$short->done_testing;
