#!/usr/bin/perl

# Bans reach the firewall whatever form of the address the key takes
# (docs/operations.md, "fail2ban"): a breaker line says key=address when the
# key's value is the client's $pow_shield_client, its $remote_addr text or
# its $binary_remote_addr bytes, directly or through a map (or geo and map,
# the limit_req idiom), IPv6 too; the shipped filter then bans exactly
# those addresses. A key from an API key is key=custom: also when it is
# another client's address, and also where the map counts everyone else by
# the address.

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
    pow_shield_secret "fail2ban-keys-suite-secret-0123456789";
    pow_shield_difficulty 1;
    pow_shield_limit 1 1h;
    pow_shield_strikes 2 1h;
    pow_shield_ban 1h after=1;

    set_real_ip_from 127.0.0.1;
    real_ip_header X-Real-IP;

    # known API keys per key, everyone else by the address (text or bytes)
    map $http_x_api_key $by_remote_addr {
        default           $remote_addr;
        "k-5c1e0a9b7d2f"  api:2001;
    }
    map $http_x_api_key $by_binary_addr {
        default           $binary_remote_addr;
        "k-0d8e4b6a2c71"  api:2002;
    }

    # the limit_req idiom: an allow-listed range exempt, the rest by address
    geo $limited {
        default         1;
        198.51.100.0/24 0;
    }
    map $limited $geo_key {
        0  "";
        1  $binary_remote_addr;
    }

    server {
        %%TEST_SERVER%%

        location /client/     { pow_shield_key $pow_shield_client; }
        location /remote/     { pow_shield_key $remote_addr; }
        location /binary/     { pow_shield_key $binary_remote_addr; }
        location /map-remote/ { pow_shield_key $by_remote_addr; }
        location /map-binary/ { pow_shield_key $by_binary_addr; }
        location /geo/        { pow_shield_key $geo_key; }
        location /api/        { pow_shield_key $http_x_api_key; }
    }
EOF
$t->write_file("html/$_/data.json", '{"ok":true}')
    for qw(client remote binary map-remote map-binary geo api);
$t->run;

sub from {
    my ($uri, $ip, %h) = @_;
    return $t->http_get("/$uri/data.json", 'X-Real-IP' => $ip, %h);
}

sub banned_after_two_offences {
    my ($uri, $ip, $name, %h) = @_;
    is(statuses(map { from($uri, $ip, %h) } 1 .. 4), '200 429 429 403',
        "$name: banned after two offences");
}

###############################################################################

# [uri, client, what the key is, extra headers]; address-derived first
my @address = (
    ['client', '192.0.2.31', '$pow_shield_client'],
    ['remote', '192.0.2.32', '$remote_addr'],
    ['binary', '192.0.2.33', '$binary_remote_addr'],
    ['map-remote', '192.0.2.34', 'a map to $remote_addr'],
    ['map-binary', '192.0.2.35', 'a map to $binary_remote_addr'],
    ['geo', '192.0.2.36', 'geo and a map to $binary_remote_addr'],
    ['remote', '2001:db8::32', '$remote_addr, IPv6'],
    ['binary', '2001:db8::33', '$binary_remote_addr, IPv6 (16 bytes)'],
    ['client', '2001:db8:0:31::7', '$pow_shield_client, IPv6 (its /64)'],
);
my @custom = (
    ['api', '192.0.2.41', 'an API key', 'X-API-Key' => 'k-9f3a61c2e8b0'],
    ['api', '192.0.2.42', 'an API key that is another address',
        'X-API-Key' => '192.0.2.99'],
    ['map-remote', '192.0.2.43', 'an API key in the $remote_addr map',
        'X-API-Key' => 'k-5c1e0a9b7d2f'],
    ['map-binary', '192.0.2.44', 'an API key in the $binary_remote_addr map',
        'X-API-Key' => 'k-0d8e4b6a2c71'],
);

banned_after_two_offences($_->[0], $_->[1], $_->[2], @$_[3 .. $#$_])
    for @address, @custom;

is(statuses(map { from('geo', '198.51.100.7') } 1 .. 4), '200 200 200 200',
    'geo: an allow-listed client has an empty key (exempt)');

my @banned = $t->error_log_lines(qr/pow_shield: client banned:/);
my @opened = $t->error_log_lines(qr/pow_shield: breaker opened:/);
for (@address) {
    my ($uri, $ip, $name) = @$_;
    ok((grep { /client=\Q$ip\E key=address / } @banned), "$name: key=address")
        or diag(join "\n", @banned);
}
for (@custom) {
    my ($uri, $ip, $name) = @$_;
    ok((grep { /client=\Q$ip\E key=custom / } @banned), "$name: key=custom")
        or diag(join "\n", @banned);
    ok(!(grep { /client=\Q$ip\E key=address/ } @banned, @opened),
        "$name: never key=address");
}
ok(!(grep { /198\.51\.100\.7/ } @banned, @opened), 'no line for the exempt client');

my $log = $t->testdir . '/error.log';
my @ip = grep { /\S/ } split /\n/, `fail2ban-regex -o ip '$log' '$FILTER' 2>&1`;
is(join(' ', sort @ip), join(' ', sort map { $_->[1] } @address),
    'the shipped filter bans every address-counted client, once, and no API key');

###############################################################################

$t->done_testing;
