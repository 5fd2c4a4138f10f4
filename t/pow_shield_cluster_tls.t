#!/usr/bin/perl

# Cluster mode over TLS (docs/directives.md "pow_shield_redis", docs/operations.md "Redis over TLS"):
# "rediss://" speaks TLS with nginx's OpenSSL, verifying Redis's certificate
# chain and name by default; a wrong CA or a wrong name is refused with a
# clear line in error.log (once) and requests are decided by pow_shield_fail;
# an address is checked against the certificate's IP addresses;
# "tls_name=" names the certificate to expect; "tls_verify=off" skips the
# checks; "tls_cert=" and "tls_key=" present a client certificate to a Redis
# that requires one (mutual TLS); TLS and "cluster" combine.  The
# certificates are made here with the openssl command.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Test::PowShield qw(:pow :util :redis);
use Test::PowShield::Certs qw(openssl_available make_ca make_cert);

###############################################################################

my $t0 = Test::PowShield->new->require_redis;
plan(skip_all => 'openssl command not found') unless openssl_available();

my $dir = $t0->testdir;

make_ca($dir, 'ca');
make_ca($dir, 'other-ca');
# the server's certificate names redis.test only, not 127.0.0.1
make_cert($dir, 'ca', 'server', 'DNS:redis.test');
make_cert($dir, 'ca', 'client', 'DNS:nginx.test');
# certificates naming an address only (IP SANs), the right one and another
make_cert($dir, 'ca', 'ip-server', 'IP:127.0.0.1');
make_cert($dir, 'ca', 'other-ip-server', 'IP:127.0.0.2');

my %tls = (cert => "$dir/server.pem", key => "$dir/server.key", ca => "$dir/ca.pem");
my $redis = $t0->run_redis(tls => { %tls, auth_clients => 'no' });

my $t_mtls = Test::PowShield->new;
my $redis_mtls = $t_mtls->run_redis(tls => { %tls, auth_clients => 'yes' });

sub conf {
    my ($redis_line) = @_;
    return http_conf(<<"EOF", workers => 1);
    pow_shield_secret "cluster-tls-suite-secret-0123456789abc";
    pow_shield_redis $redis_line;
    pow_shield_strikes off;

    server {
        %%TEST_SERVER%%

        pow_shield_key \$http_x_client;
        pow_shield_limit 3 1h;
        # Redis unavailable: 503, so that each answer says who decided
        pow_shield_fail closed;

        location / {
        }
    }
EOF
}

# An nginx whose pow_shield_redis is rediss:// to $r's TLS port plus @opts.
sub node {
    my ($t, $r, @opts) = @_;
    $t->use_redis($r);
    $t->write_file_expand('nginx.conf',
        conf(join ' ', 'rediss://127.0.0.1:%%REDIS_TLS_PORT%%', @opts));
    $t->write_file('html/data.json', qq({"ok":true}\n));
    $t->run;
    return $t;
}

sub get {
    my ($t, $client) = @_;
    return $t->http_get('/data.json', 'X-Client' => $client);
}

sub four { my ($t, $client) = @_; statuses(map { get($t, $client) } 1 .. 4) }

sub wkey { client_key($_[0], 'w', 3, 3600000) }

# TEST_TLS_SHOW=1: print each node's pow_shield lines
sub show {
    return unless $ENV{TEST_TLS_SHOW};
    diag($_) for $_[0]->error_log_lines(qr/pow_shield: redis/);
}

###############################################################################

# verified TLS, the name given by tls_name=

my $ok = node($t0, $redis, "tls_ca=$dir/ca.pem", 'tls_name=redis.test');
is(four($ok, 'tls-a'), '200 200 200 429',
    'rediss:// with tls_ca= and tls_name=: Redis counts (3, then 429)');
is($redis->cmd('ZCARD', wkey('tls-a')), 3, '... the window is in Redis');
is($ok->error_log_count(qr/unavailable/), 0, '... and Redis was never unavailable');

# a CA that did not sign Redis's certificate

my $bad_ca = node(Test::PowShield->new, $redis,
    "tls_ca=$dir/other-ca.pem", 'tls_name=redis.test');
is(four($bad_ca, 'tls-b'), '503 503 503 503',
    'wrong CA: Redis is refused, pow_shield_fail decides (closed: 503)');
is($redis->cmd('EXISTS', wkey('tls-b')), 0, '... nothing reached Redis');
is($bad_ca->error_log_count(
        qr/redis \S+ unavailable \(certificate verify failed: \(\d+: [^)]+\)\)/), 1,
    '... logged once, with OpenSSL\'s reason');

# the name checked is the URL's host (127.0.0.1) unless tls_name= says otherwise

my $bad_name = node(Test::PowShield->new, $redis, "tls_ca=$dir/ca.pem");
is(four($bad_name, 'tls-c'), '503 503 503 503',
    'the certificate does not name the URL host: refused');
is($bad_name->error_log_count(qr/unavailable \(certificate does not match "127\.0\.0\.1"\)/), 1,
    '... logged once with the name checked');

# an address in the URL is checked against the certificate's IP addresses

my $t_ip = Test::PowShield->new;
my $redis_ip = $t_ip->run_redis(tls => { cert => "$dir/ip-server.pem",
    key => "$dir/ip-server.key", ca => "$dir/ca.pem", auth_clients => 'no' });
my $ip_ok = node($t_ip, $redis_ip, "tls_ca=$dir/ca.pem");
is(four($ip_ok, 'tls-i'), '200 200 200 429',
    'a certificate for IP 127.0.0.1 verifies for rediss://127.0.0.1 without tls_name=');
is($ip_ok->error_log_count(qr/unavailable/), 0, '... and Redis was never unavailable');

my $t_other_ip = Test::PowShield->new;
my $redis_other_ip = $t_other_ip->run_redis(tls => { cert => "$dir/other-ip-server.pem",
    key => "$dir/other-ip-server.key", ca => "$dir/ca.pem", auth_clients => 'no' });
my $ip_bad = node($t_other_ip, $redis_other_ip, "tls_ca=$dir/ca.pem");
is(four($ip_bad, 'tls-j'), '503 503 503 503',
    'a certificate for another IP address is refused');
is($ip_bad->error_log_count(qr/unavailable \(certificate does not match "127\.0\.0\.1"\)/), 1,
    '... logged once with the address checked');

# tls_verify=off: encrypted, nothing checked

my $unverified = node(Test::PowShield->new, $redis,
    "tls_ca=$dir/other-ca.pem", 'tls_verify=off');
is(four($unverified, 'tls-d'), '200 200 200 429',
    'tls_verify=off: neither the CA nor the name is checked');

# a Redis that requires a client certificate (tls-auth-clients yes)

my $anonymous = node($t_mtls, $redis_mtls, "tls_ca=$dir/ca.pem", 'tls_name=redis.test');
is(four($anonymous, 'tls-e'), '503 503 503 503',
    'mutual TLS required, no client certificate: refused');
is($anonymous->error_log_count(
        qr/redis \S+ unavailable \(.*(?:certificate|closed|alert|SSL)/i), 1,
    '... logged once, with the reason');

my $mutual = node(Test::PowShield->new, $redis_mtls, "tls_ca=$dir/ca.pem",
    'tls_name=redis.test', "tls_cert=$dir/client.pem", "tls_key=$dir/client.key");
is(four($mutual, 'tls-f'), '200 200 200 429',
    'mutual TLS with tls_cert= and tls_key=: Redis counts');
is($redis_mtls->cmd('ZCARD', wkey('tls-f')), 3, '... in the Redis that required it');

# TLS and cluster combine: a one-node Redis Cluster (all slots on it) whose
# nodes talk TLS (tls-cluster yes: it announces its TLS port to TLS clients)

my $t_cl = Test::PowShield->new;
my $redis_cl = $t_cl->run_redis(tls => { %tls, auth_clients => 'no' },
    args => ['--cluster-enabled', 'yes', '--tls-cluster', 'yes',
        '--cluster-config-file', $t_cl->testdir . '/nodes.conf']);
$redis_cl->cmd('CLUSTER', 'ADDSLOTSRANGE', 0, 16383);
ok(eventually(10, sub { ($redis_cl->cmd('CLUSTER', 'INFO') // '') =~ /cluster_state:ok/ }),
    'a one-node cluster over TLS');
my $clustered = node($t_cl, $redis_cl, 'cluster', "tls_ca=$dir/ca.pem", 'tls_name=redis.test');
is(four($clustered, 'tls-h'), '200 200 200 429',
    'rediss:// with cluster: the map read and the limit counted over TLS');
is($redis_cl->cmd('ZCARD', wkey('tls-h')), 3, '... in the cluster');
my $tls_port = $redis_cl->tls_port;
is($clustered->error_log_count(
        qr/cluster map: 1 slot ranges on 1 masters \(127\.0\.0\.1:$tls_port\)/), 1,
    '... whose node is announced with its TLS port');

# without tls_name=, each cluster node is checked against the address it
# announces: a certificate with that IP address only will do

my $t_clip = Test::PowShield->new;
my $redis_clip = $t_clip->run_redis(tls => { cert => "$dir/ip-server.pem",
        key => "$dir/ip-server.key", ca => "$dir/ca.pem", auth_clients => 'no' },
    args => ['--cluster-enabled', 'yes', '--tls-cluster', 'yes',
        '--cluster-config-file', $t_clip->testdir . '/nodes.conf']);
$redis_clip->cmd('CLUSTER', 'ADDSLOTSRANGE', 0, 16383);
ok(eventually(10, sub { ($redis_clip->cmd('CLUSTER', 'INFO') // '') =~ /cluster_state:ok/ }),
    'a one-node cluster over TLS, its certificate for IP 127.0.0.1');
my $clip = node($t_clip, $redis_clip, 'cluster', "tls_ca=$dir/ca.pem");
is(four($clip, 'tls-k'), '200 200 200 429',
    'cluster without tls_name=: the announced node verifies by its IP address');
is($clip->error_log_count(qr/unavailable/), 0, '... and was never unavailable');

# Redis restarts: the TLS connection comes back

$redis->restart;
my $back = eventually(10, sub { get($ok, 'tls-g')->status eq '200'
        && ($redis->cmd('EXISTS', wkey('tls-g')) // 0) == 1 });
ok($back, 'after a Redis restart, the TLS connection is made again');

Test::PowShield->done_testing;
