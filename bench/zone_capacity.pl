#!/usr/bin/perl

# How many spent challenges a pow_shield_zone holds (docs/operations.md,
# "Sizing the zone"): new clients, over a limit of 1 per hour, each solve
# and spend one challenge until a solution gets a fresh 429 instead of a
# 200: spent records then fill the half of the zone they may take. Every
# entry (a spent record, a client's window, a client's breaker) takes the
# same 256-byte slot, so twice that is the zone's capacity in entries.
#
#   perl bench/zone_capacity.pl [size]      (size: an nginx size, default 256k)

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../t/lib";

use Test::More;
use Test::PowShield qw(:pow);

my $size = shift // '256k';
my $t = Test::PowShield->new;
$t->write_file('html/x', '{}');
$t->write_file_expand('nginx.conf', <<"EOF");
%%TEST_GLOBALS%%
events { }
http {
    %%TEST_GLOBALS_HTTP%%
    access_log off;
    pow_shield_secret "zone-capacity-secret-0123456789abcdef";
    pow_shield_zone $size;
    server {
        listen 127.0.0.1:%%PORT_8080%%;
        root %%TESTDIR%%/html;
        location = /x {
            pow_shield_limit 1 1h;
            pow_shield_difficulty 1;
            pow_shield_strikes off;
            pow_shield_challenge_ttl 1h;
            pow_shield_key \$http_x_client;
        }
    }
}
EOF
$t->run;

my ($spent, $status) = (0, 0);
for (my $i = 1; ; $i++) {
    $t->http_get('/x', 'X-Client' => "c$i");    # the client's free request
    my $c = $t->http_get('/x', 'X-Client' => "c$i");
    $status = $c->status;
    last unless $status == 429;
    my $r = $t->http_get('/x', 'X-Client' => "c$i", solution($c));
    $status = $r->status;
    last unless $status == 200;
    $spent++;
}
is($status, 429, "a solution the spent half cannot take gets a fresh 429");
my $bytes = $size =~ /^(\d+)k$/i ? $1 * 1024 : $size =~ /^(\d+)m$/i ? $1 << 20 : $size;
diag(sprintf "pow_shield_zone %s: %d spent records (half the zone): %.0f bytes per entry, %.0f entries per MB",
    $size, $spent, $bytes / (2 * $spent), 2 * $spent * (1 << 20) / $bytes);
$t->done_testing;
