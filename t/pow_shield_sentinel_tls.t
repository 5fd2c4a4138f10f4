#!/usr/bin/perl

# Redis Sentinel over TLS (docs/operations.md, "Redis Sentinel"):
# pow_shield_redis sentinels://... speaks TLS to the sentinels and to the
# master they name, verifying each certificate (chain and address) with
# tls_ca=.  One master, one replica and three sentinels of Debian's
# redis-sentinel, all with TLS (tls-port, tls-replication yes): the
# sentinels answer the master's TLS port; requests flow, the master is
# killed, the sentinels promote the replica, requests go on with no 5xx
# under pow_shield_fail local.  Verification is on: the sentinels'
# certificates and the Redis servers' are signed by two different CAs, so
# a tls_ca= that trusts only the sentinels' CA reaches the sentinels but
# refuses the master, and one that trusts neither refuses the sentinels;
# each is logged with OpenSSL's reason and requests are decided by
# pow_shield_fail (200), never a 5xx; a sentinel that refuses TLS is
# logged once per worker, however often it is tried again.  With the
# sentinels announcing host names, the master's certificate is checked
# against the name they gave.  The certificates are made here with the
# openssl command.
#
# No durations are asserted; the time the switch took is printed.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Test::PowShield qw(:pow :util);
use Test::PowShield::Certs qw(openssl_available make_ca make_cert);
use Test::PowShield::Metrics qw(scrape total);
use Test::PowShield::Sentinel;

###############################################################################

my $t = Test::PowShield->new->require_redis;
plan(skip_all => 'redis-sentinel not installed (apt-get install redis-sentinel)')
    unless Test::PowShield::Sentinel::available();
plan(skip_all => 'openssl command not found') unless openssl_available();
my $dir = $t->testdir;
plan(skip_all => 'redis-server was built without TLS')
    unless Test::PowShield::Sentinel::tls_available($dir, $t->port('tls_probe'));

# one CA for the sentinels, another for the Redis servers, certificates for 127.0.0.1
make_ca($dir, $_) for qw(sentinel-ca redis-ca other-ca);
make_cert($dir, 'sentinel-ca', 'sentinel', 'IP:127.0.0.1');
make_cert($dir, 'redis-ca', 'redis', 'IP:127.0.0.1');
# what every server (and the first nginx) trusts: both CAs
$t->write_file('both-ca.pem', $t->read_file('sentinel-ca.pem') . $t->read_file('redis-ca.pem'));

my $s = Test::PowShield::Sentinel->new($t, tls => {
    cert => "$dir/sentinel.pem", key => "$dir/sentinel.key",
    redis_cert => "$dir/redis.pem", redis_key => "$dir/redis.key",
    ca => "$dir/both-ca.pem",
})->start;
my ($r0, $r1) = $s->redis;
my ($p0, $p1) = ($r0->tls_port, $r1->tls_port);
my $hosts = $s->hosts;

is($s->master_port, $p0, 'the sentinels answer the master\'s TLS port');

sub conf {
    my ($ca) = @_;
    return http_conf(<<"EOF", workers => 2);
    pow_shield_secret "sentinel-tls-suite-secret-0123456789abc";
    pow_shield_redis sentinels://$hosts/mymaster tls_ca=$dir/$ca
                     timeout=200ms connect_timeout=200ms;
    pow_shield_fail local;

${\ Test::PowShield::Sentinel::server_block(metrics => 1)}
EOF
}

Test::PowShield::Sentinel::run_nginx($t, conf('both-ca.pem'));

###############################################################################

sub get { Test::PowShield::Sentinel::request($_[2] // $t, @_[0, 1]) }

sub switched {
    $t->error_log_count(qr/redis sentinel: master "mymaster" switched from 127\.0\.0\.1:$p0 to 127\.0\.0\.1:$p1/);
}

ok(eventually(10, sub {
    $t->error_log_count(qr/redis sentinel: master "mymaster" is at 127\.0\.0\.1:$p0/) == 2
}), 'each worker asked the sentinels over TLS: the master is r0\'s TLS port');
ok(eventually(10, sub { get('flow', 'warm')->status == 200 && $r0->counts('warm') }),
    'requests are decided by the master, over TLS');
is($t->error_log_count(qr/unavailable/), 0, '... no sentinel nor master was refused');

is(join(' ', map { get('limited', 'lim')->status } 1 .. 3), '200 200 200',
    'a client uses 3 of its 5 requests');
ok(eventually(30, sub { ($r0->cmd('WAIT', 1, 1000) // 0) == 1 }),
    'the replica has all of it (replication over TLS)');

# the failover
my ($n, $statuses, $t_switch) = $s->failover_under(sub { get('flow', 'f' . ($_[0] % 20)) },
    sub { switched() == 2 });
ok(defined $t_switch, 'both workers switched to the promoted replica\'s TLS port');
diag('failover over TLS: ' . Test::PowShield::Sentinel::failover_summary($n, $statuses, $t_switch));
is(join(' ', grep { !/^200$/ } keys %$statuses), '', 'all 200 during the failover (pow_shield_fail local)');
ok(eventually(30, sub { ($s->master_port // 0) == $p1 }), 'the sentinels name r1');
ok(eventually(10, sub { get('flow', 'after')->status == 200 && $r1->counts('after') }),
    'requests are decided by the new master, over TLS');
is(join(' ', map { get('limited', 'lim')->status } 1 .. 3), '200 200 429',
    'the limit continues from what the replica had');

###############################################################################

# Verification is on.  tls_ca= trusts the sentinels' CA only: the sentinels
# answer, the master they name is refused.

my $t2 = Test::PowShield->new;
Test::PowShield::Sentinel::run_nginx($t2, conf('sentinel-ca.pem'));

ok(eventually(10, sub {
    $t2->error_log_count(qr/redis sentinel: master "mymaster" is at 127\.0\.0\.1:$p1/) == 2
}), 'a CA of the sentinels only: the sentinels answer');
# (Redis's health is the node's: a worker that finds the other one stood
# in already may say so instead of meeting the certificate itself.)
ok(eventually(10, sub {
    $t2->error_log_count(qr/\[error\].*redis 127\.0\.0\.1:$p1 \(master "mymaster"\) unavailable \(certificate verify failed: \(\d+: [^)]+\)\)/) >= 1
    && $t2->error_log_count(qr/\[error\].*redis 127\.0\.0\.1:$p1 \(master "mymaster"\) unavailable \((?:certificate verify failed|another worker of this node found it unavailable)/) == 2
}), '... the master\'s certificate is refused (logged by each worker, or once and followed by the other)');
is(join(' ', map { get('limited', 'ca2', $t2)->status } 1 .. 6), '200 200 200 200 200 429',
    '... requests are decided by pow_shield_fail local, no 5xx');
ok(!$r1->counts('ca2'), '... not by Redis');

# tls_ca= trusts neither: the sentinels are refused

my $t3 = Test::PowShield->new;
Test::PowShield::Sentinel::run_nginx($t3, conf('other-ca.pem'));

my $refused = qr/\[error\] (\d+)#.*redis sentinel 127\.0\.0\.1:(\d+) unavailable \(certificate verify failed: \(\d+: [^)]+\)\); the other sentinels are asked$/;
ok(eventually(10, sub { $t3->error_log_count($refused) >= 2 }),
    'a wrong CA: the sentinels\' certificates are refused, with OpenSSL\'s reason');

# The workers go on asking the sentinels in turn, each time on a new
# connection: each sentinel's refusal is still logged once per worker (at
# most 3 sentinels x 2 workers lines), not once per connection.  Waited
# for by the failures counted in pow_shield_redis_errors_total.
sub redis_errors { total(scrape($t3), 'pow_shield_redis_errors_total') }
ok(eventually(60, sub { redis_errors() >= 30 }),
    '... the workers tried the sentinels again and again (30 failed connections)');
my %per = %{Test::PowShield::Sentinel::lines_per_worker($t3, $refused)};
is(join(' ', grep { $per{$_} > 1 } sort keys %per), '',
    '... each sentinel\'s refusal is logged once per worker, not per connection');
cmp_ok(scalar(keys %per), '<=', 6, '... at most 3 sentinels x 2 workers lines');
is(join(' ', map { get('limited', 'ca3', $t3)->status } 1 .. 6), '200 200 200 200 200 429',
    '... requests are decided by pow_shield_fail local, no 5xx');
ok(!$r1->counts('ca3'), '... not by Redis');
ok(!$t3->error_log_count(qr/master "mymaster" is at/), '... and no master was learnt');

###############################################################################

# TLS and host names together: the sentinels announce the master by name
# (see t/pow_shield_sentinel_names.t) and the Redis servers' certificate
# names only those names (no address): the master's certificate is checked
# against the name the sentinels gave, resolved by nginx's resolver.

SKIP: {
    skip 'nss_wrapper not installed (apt-get install libnss-wrapper)', 4
        unless Test::PowShield::Sentinel::names_available();
    require Test::PowShield::DNS;

    make_cert($dir, 'redis-ca', 'redis-names', 'DNS:redis-a.test,DNS:redis-b.test');
    my $t4 = Test::PowShield->new;
    my @names = qw(redis-a.test redis-b.test);
    my $s4 = Test::PowShield::Sentinel->new($t4, names => \@names, tls => {
        cert => "$dir/sentinel.pem", key => "$dir/sentinel.key",
        redis_cert => "$dir/redis-names.pem", redis_key => "$dir/redis-names.key",
        ca => "$dir/both-ca.pem",
    })->start;
    my ($n0) = $s4->redis;
    my $np0 = $n0->tls_port;
    is(join(':', $s4->master_addr), "redis-a.test:$np0", 'TLS and names: the sentinels answer a name');
    my $dns = Test::PowShield::DNS->new($t4,
        names => { map { $_ => '127.0.0.1' } @names })->start;
    my $resolver = "    resolver 127.0.0.1:${\ $dns->port} valid=1s ipv6=off;\n"
        . "    resolver_timeout 1s;\n";
    (my $conf4 = conf('both-ca.pem')) =~ s/^(\s*pow_shield_redis )sentinels:\/\/\S+/$resolver$1sentinels:\/\/${\ $s4->hosts}\/mymaster/m;
    Test::PowShield::Sentinel::run_nginx($t4, $conf4);
    ok(eventually(10, sub {
        $t4->error_log_count(qr/redis sentinel: master "mymaster" is at redis-a\.test:$np0/) == 2
    }), '... each worker learnt the master by name');
    ok(eventually(10, sub { get('flow', 'named', $t4)->status == 200 && $n0->counts('named') }),
        '... requests are decided by it over TLS, its certificate checked against the name');
    is($t4->error_log_count(qr/unavailable/), 0, '... nothing was refused');
    $s4->stop;
}

###############################################################################

$t->done_testing;
$s->stop;
