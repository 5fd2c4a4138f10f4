#!/usr/bin/perl

# Bans work as shipped with the README's key shape (docs/operations.md,
# "fail2ban"): where pow_shield_key is a map that counts known API keys per
# key and everyone else by $pow_shield_client, a client counted by its
# address is logged key=address (the shipped filter bans it), and a client
# counted by an API key key=custom (not something to ban an address for).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Test::PowShield qw(:pow :util);

###############################################################################

plan(skip_all => 'fail2ban not installed (Debian: fail2ban)')
    unless `sh -c 'command -v fail2ban-regex'`;

my $FILTER = "$Test::PowShield::REPO/nginx-conf/fail2ban/filter.d/pow-shield.conf";

my $t = Test::PowShield->new;
$t->write_file_expand('nginx.conf', http_conf(<<'EOF'));
    pow_shield_secret "fail2ban-map-suite-secret-0123456789ab";
    pow_shield_difficulty 1;

    set_real_ip_from 127.0.0.1;
    real_ip_header X-Real-IP;

    # known API keys count per key, everything else by the address
    map $http_x_api_key $pow_key {
        default           $pow_shield_client;
        "k-3b8d2f17c9e4"  api:1041;
    }

    server {
        %%TEST_SERVER%%

        location /api/ {
            pow_shield_key $pow_key;
            pow_shield_limit 1 1h;
            pow_shield_strikes 2 1h;
            pow_shield_ban 1h after=1;
        }
    }
EOF
$t->write_file('html/api/data.json', '{"ok":true}');
$t->run;

sub from {
    my ($ip, %h) = @_;
    return $t->http_get('/api/data.json', 'X-Real-IP' => $ip, %h);
}

###############################################################################

is(statuses(map { from('192.0.2.20') } 1 .. 4), '200 429 429 403',
    'no API key: counted by the address, banned after two offences');
is(statuses(map { from('192.0.2.21', 'X-API-Key' => 'k-3b8d2f17c9e4') } 1 .. 4),
    '200 429 429 403', 'a known API key: counted by the key, banned too');

my @banned = $t->error_log_lines(qr/pow_shield: client banned:/);
ok((grep { /client=192\.0\.2\.20 key=address/ } @banned),
    'the client the map counts by $pow_shield_client: key=address');
ok((grep { /client=192\.0\.2\.21 key=custom/ } @banned),
    'the client counted by its API key: key=custom');

my $log = $t->testdir . '/error.log';
my @ip = grep { /\S/ } split /\n/, `fail2ban-regex -o ip '$log' '$FILTER' 2>&1`;
is("@ip", '192.0.2.20', 'the shipped filter bans the address-counted client, not the API key');

###############################################################################

$t->done_testing;
