#!/usr/bin/perl

# The default client identity, $pow_shield_client (docs/directives.md,
# pow_shield_key): IPv4 clients are counted per address, IPv6 clients per
# /64, an IPv4-mapped IPv6 address as its IPv4 address. The identity is the
# address after realip, so the tests set the client address with X-Real-IP.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use IO::Socket::UNIX;
use Test::More;
use Test::PowShield qw(http_conf);

###############################################################################

my $t = Test::PowShield->new;

$t->write_file_expand('nginx.conf', http_conf(<<'EOF'));
    log_format client '$uri $pow_shield_client';

    server {
        listen 127.0.0.1:%%PORT_8080%%;
        listen unix:%%TESTDIR%%/client.sock;
        server_name localhost;

        root %%TESTDIR%%/html;
        access_log %%TESTDIR%%/client.log client;

        set_real_ip_from 127.0.0.1;
        real_ip_header X-Real-IP;

        pow_shield_difficulty 1;

        # the default key: one request per client
        location /api/ {
            pow_shield_limit 1 1h;
        }

        location /keyed/ {
            pow_shield_limit 1 1h;
            pow_shield_key "$pow_shield_client:$http_x_api_key";
        }

        # unshielded: the variable needs no shield
        location = /whoami {
            return 200 "$pow_shield_client";
        }
    }
EOF

$t->write_file('html/api/data.json', '{}');
$t->write_file('html/keyed/data.json', '{}');
$t->run;

sub from { my ($ip, $uri) = @_; $t->http_get($uri // '/api/data.json', 'X-Real-IP' => $ip) }
sub whoami { from($_[0], '/whoami')->body }

###############################################################################

# the value

is(whoami('192.0.2.1'), '192.0.2.1', 'IPv4: the address');
is(whoami('2001:db8:1:2:aaaa:bbbb:cccc:dddd'), '2001:db8:1:2::/64',
    'IPv6: the /64 prefix');
is(whoami('2001:db8::7'), '2001:db8::/64', 'IPv6: the prefix is compressed');
is(whoami('::ffff:192.0.2.1'), '192.0.2.1',
    'IPv4-mapped IPv6: the IPv4 address');
is($t->http_get('/whoami')->body, '127.0.0.1',
    'without realip: the connection address');

# a UNIX-domain socket peer has no address

{
    my $s = IO::Socket::UNIX->new(Peer => $t->testdir . '/client.sock')
        or die "connect: $!";
    print $s "GET /whoami HTTP/1.0\r\nHost: localhost\r\n\r\n";
    local $/;
    my $raw = <$s> // '';
    like($raw, qr/\r\n\r\nunix:\z/, 'UNIX-domain socket: unix:');
}

# the default key counts an IPv6 /64 as one client

is(from('2001:db8:1:2::1')->status, 200, 'IPv6: the first address of a /64 passes');
is(from('2001:db8:1:2::2')->status, 429,
    'IPv6: another address of the same /64 is over the same limit');
is(from('2001:db8:1:2:ffff:ffff:ffff:ffff')->status, 429,
    'IPv6: the last address of the /64 too');
is(from('2001:db8:1:3::1')->status, 200, 'IPv6: another /64 has its own limit');

# IPv4: per address; a mapped address is the IPv4 client

is(from('198.51.100.7')->status, 200, 'IPv4: the first request passes');
is(from('198.51.100.8')->status, 200, 'IPv4: the next address has its own limit');
is(from('::ffff:198.51.100.7')->status, 429,
    'IPv4-mapped IPv6: the same limit as its IPv4 address');

# in an operator's key

is(from('2001:db8:5:5::1', '/keyed/data.json')->status, 200,
    'own key: the /64 passes once');
is($t->http_get('/keyed/data.json', 'X-Real-IP' => '2001:db8:5:5::2',
    'X-Api-Key' => 'k')->status, 200,
    'own key: the same /64 with another API key is another client');
is($t->http_get('/keyed/data.json', 'X-Real-IP' => '2001:db8:5:5::3',
    'X-Api-Key' => 'k')->status, 429,
    'own key: the same /64 and API key is the same client');

# in log_format

my @log = grep { length } split /\n/, $t->read_file('client.log');
is((grep { m{^/whoami } } @log)[1], '/whoami 2001:db8:1:2::/64',
    'log_format: $pow_shield_client of an IPv6 client');

###############################################################################

$t->done_testing;
