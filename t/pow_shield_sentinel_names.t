#!/usr/bin/perl

# Redis Sentinel announcing host names (docs/operations.md, "Redis
# Sentinel"): the master and the replica announce names
# (replica-announce-ip redis-a.test / redis-b.test) and the sentinels
# resolve and announce host names (sentinel resolve-hostnames yes,
# announce-hostnames yes), so SENTINEL get-master-addr-by-name answers a
# name.  The module resolves it with nginx's asynchronous resolver (the
# "resolver" directive, pointing at the test's DNS responder, the only
# place nginx can learn these names), before and after a failover to the
# replica announced under the other name: requests all 200 under
# pow_shield_fail local.  Without a "resolver", nginx -t passes (it cannot
# know what the sentinels will announce), each worker logs once that the
# announced name needs a resolver, and requests are decided by
# pow_shield_fail.
#
# The Redis processes resolve the names through nss_wrapper (Debian's
# libnss-wrapper) and a hosts file of the test's own.  No durations are
# asserted; the time the switch took is printed.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Test::PowShield qw(:pow :util);
use Test::PowShield::DNS;
use Test::PowShield::Sentinel;

###############################################################################

my $t = Test::PowShield->new->require_redis;
plan(skip_all => 'redis-sentinel not installed (apt-get install redis-sentinel)')
    unless Test::PowShield::Sentinel::available();
plan(skip_all => 'nss_wrapper not installed (apt-get install libnss-wrapper)')
    unless Test::PowShield::Sentinel::names_available();

my @names = qw(redis-a.test redis-b.test);
my $s = Test::PowShield::Sentinel->new($t, names => \@names)->start;
my ($r0, $r1) = $s->redis;
my ($p0, $p1) = ($r0->port, $r1->port);
my $hosts = $s->hosts;
my $dns = Test::PowShield::DNS->new($t,
    names => { map { $_ => '127.0.0.1' } @names })->start;
my $dns_port = $dns->port;

is(join(':', $s->master_addr), "redis-a.test:$p0", 'the sentinels answer a host name');

my $conf = <<"EOF";
    pow_shield_secret "sentinel-names-suite-secret-0123456789ab";
    resolver 127.0.0.1:$dns_port valid=1s ipv6=off;
    resolver_timeout 1s;
    pow_shield_redis sentinel://$hosts/mymaster timeout=200ms connect_timeout=200ms;
    pow_shield_fail local;

${\ Test::PowShield::Sentinel::server_block()}
EOF
Test::PowShield::Sentinel::run_nginx($t, http_conf($conf, workers => 2));

###############################################################################

sub get { Test::PowShield::Sentinel::request($_[2] // $t, @_[0, 1]) }

sub switched {
    $t->error_log_count(qr/redis sentinel: master "mymaster" switched from redis-a\.test:$p0 to redis-b\.test:$p1/);
}

ok(eventually(10, sub {
    $t->error_log_count(qr/redis sentinel: master "mymaster" is at redis-a\.test:$p0/) == 2
}), 'each worker asked the sentinels: the master is redis-a.test');
ok(eventually(10, sub { get('flow', 'warm')->status == 200 && $r0->counts('warm') }),
    'requests are decided by the master the name resolves to');
cmp_ok($dns->queries('redis-a.test'), '>=', 1, '... the name was asked of nginx\'s resolver');

is(join(' ', map { get('limited', 'lim')->status } 1 .. 3), '200 200 200',
    'a client uses 3 of its 5 requests');
ok(eventually(30, sub { ($r0->cmd('WAIT', 1, 1000) // 0) == 1 }), 'the replica has all of it');

# the failover, to the replica announced as redis-b.test
my ($n, $statuses, $t_switch) = $s->failover_under(sub { get('flow', 'f' . ($_[0] % 20)) },
    sub { switched() == 2 });
ok(defined $t_switch, 'both workers switched to the master announced as redis-b.test');
diag('failover by name: ' . Test::PowShield::Sentinel::failover_summary($n, $statuses, $t_switch));
is(join(' ', grep { !/^200$/ } keys %$statuses), '', 'all 200 during the failover (pow_shield_fail local)');
ok(eventually(30, sub { join(':', $s->master_addr) eq "redis-b.test:$p1" }),
    'the sentinels name redis-b.test');

ok(eventually(10, sub { get('flow', 'after')->status == 200 && $r1->counts('after') }),
    'requests are decided by the new master');
cmp_ok($dns->queries('redis-b.test'), '>=', 1, '... its name resolved by nginx\'s resolver');
is(join(' ', map { get('limited', 'lim')->status } 1 .. 3), '200 200 429',
    'the limit continues from what the replica had');
ok(!$t->error_log_count(qr/announced by name/), 'no name was refused');
ok(!$t->error_log_count(qr/\[(?:alert|crit)\]/), 'no alert');

###############################################################################

# Without a resolver: nginx -t passes (the sentinels' hosts are
# addresses; what they will announce is not known before they are asked),
# each worker logs once that the master's name needs a resolver, and
# requests are decided by pow_shield_fail, not by Redis.  The sentinels are
# asked again and again meanwhile (with back-off, up to every 2 s): to see
# that the name is still logged only once, the second nginx asks a sentinel
# stand-in that answers as the real ones do now (redis-b.test) and counts
# the questions.

my $t2 = Test::PowShield->new;
my $asked_file = $t2->testdir . '/asked';
my $fake_port = $t2->port('fake_sentinel');
Test::PowShield::Redis::fake_peer($fake_port, sub {
    my ($in) = @_;
    my $out = '';
    while ($in =~ /\*\d+\r\n\$\d+\r\n(\w+)\r\n(?:\$\d+\r\n([\w+-]+)\r\n)?/g) {
        my ($cmd, $arg) = (uc $1, $2 // '');
        if ($cmd eq 'SENTINEL' && lc $arg eq 'get-master-addr-by-name') {
            open my $fh, '>>', $asked_file or die $!;
            print $fh "asked\n";
            close $fh;
            $out .= "*2\r\n\$12\r\nredis-b.test\r\n\$" . length($p1) . "\r\n$p1\r\n";
        } elsif ($cmd eq 'SUBSCRIBE') {
            $out .= "*3\r\n\$9\r\nsubscribe\r\n\$" . length($arg) . "\r\n$arg\r\n:1\r\n";
        } else {
            $out .= "+OK\r\n";
        }
    }
    return $out;
});

sub asked {
    open my $fh, '<', $asked_file or return 0;
    return scalar(() = <$fh>);
}

(my $conf2 = $conf) =~ s/^\s*resolver(?:_timeout)? .*\n//mg;
$conf2 =~ s{sentinel://\S+/mymaster}{sentinel://127.0.0.1:$fake_port/mymaster};
$t2->write_file_expand('nginx.conf', http_conf($conf2, workers => 2));
my ($rc, $out) = $t2->test_config;
is($rc, 0, 'without a resolver: nginx -t passes') or diag($out);
unlike($out // '', qr/resolver/, '... and says nothing about a resolver (the sentinels are addresses)');
Test::PowShield::Sentinel::run_nginx($t2, http_conf($conf2, workers => 2));

my $refused = qr/\[error\].*redis sentinel: master "mymaster" is announced by name \(redis-b\.test:$p1\); a "resolver" is needed to use it/;
ok(eventually(10, sub { $t2->error_log_count($refused) == 2 }),
    'each worker logs that the announced name needs a resolver');
is(join(' ', map { get('limited', 'noresolver', $t2)->status } 1 .. 6), '200 200 200 200 200 429',
    'requests are decided by pow_shield_fail local (the zone)');
ok(!$r1->counts('noresolver'), '... not by Redis');
my $n_asked = asked();
ok(eventually(60, sub { asked() >= $n_asked + 8 }),
    'the workers asked the sentinel again, several times');
is($t2->error_log_count($refused), 2, '... the name is logged once per worker, not at every answer');
ok(!$r1->counts('noresolver'), '... and still not used');

###############################################################################

$t->done_testing;
$s->stop;
