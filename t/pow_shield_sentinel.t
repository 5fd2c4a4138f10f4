#!/usr/bin/perl

# Redis Sentinel (docs/operations.md, "Redis Sentinel"): pow_shield_redis
# sentinel://... asks the sentinels for the master, on the event loop, and
# follows a failover without a reload.  One master, one replica, three
# sentinels (Debian's redis-sentinel) on loopback ports: requests flow, the
# master is killed, the sentinels promote the replica, requests go on with
# no 5xx under pow_shield_fail local, the switch is logged once per worker,
# and limits and strikes continue from what the replica had.
#
# No durations are asserted; the time the switch took is printed.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Test::PowShield qw(:pow :util);
use Test::PowShield::Metrics qw(scrape total);
use Test::PowShield::Sentinel;

###############################################################################

my $t = Test::PowShield->new->require_redis;
plan(skip_all => 'redis-sentinel not installed (apt-get install redis-sentinel)')
    unless Test::PowShield::Sentinel::available();

my $s = Test::PowShield::Sentinel->new($t)->start;
my ($r0, $r1) = $s->redis;
my $hosts = $s->hosts;

$t->write_file_expand('nginx.conf', http_conf(<<"EOF", workers => 2));
    pow_shield_secret "sentinel-suite-secret-0123456789abcdef";
    pow_shield_redis sentinel://$hosts/mymaster timeout=200ms connect_timeout=200ms;
    pow_shield_fail local;
    pow_shield_strikes 3 1h;

${\ Test::PowShield::Sentinel::server_block(trap => 1, metrics => 1)}
EOF
$t->write_file("html/$_/data.json", qq({"ok":true}\n)) for qw(limited flow);
$t->run;

###############################################################################

sub get {
    my ($loc, $client) = @_;
    return $t->http_get("/$loc/data.json", 'X-Client' => $client);
}

sub switched { $t->error_log_count(qr/redis sentinel: master "mymaster" switched from \S+ to 127\.0\.0\.1:${\ $r1->port}/) }

ok(eventually(10, sub {
    $t->error_log_count(qr/redis sentinel: master "mymaster" is at 127\.0\.0\.1:${\ $r0->port}/) == 2
}), 'each worker asked the sentinels: the master is r0');
ok(eventually(10, sub {
    get('flow', 'warm')->status == 200 && @{$r0->cmd('KEYS', 'pow:*') // []} > 0;
}), 'requests are decided by the master');

# before the failover: 3 of the 5 allowed, 2 of the 3 strikes
is(join(' ', map { get('limited', 'lim')->status } 1 .. 3), '200 200 200',
    'a client uses 3 of its 5 requests');
is(join(' ', map { $t->http_get('/trap', 'X-Client' => 'striker')->status } 1 .. 2),
    '404 404', 'another hits the trap twice (2 strikes of 3)');
ok(eventually(30, sub { ($r0->cmd('WAIT', 1, 1000) // 0) == 1 }), 'the replica has all of it');

# the failover
my ($n, $statuses, $t_switch) = $s->failover_under(sub { get('flow', 'f' . ($_[0] % 20)) },
    sub { switched() == 2 });
ok(defined $t_switch, 'both workers switched to the promoted replica');
diag('failover: ' . Test::PowShield::Sentinel::failover_summary($n, $statuses, $t_switch));
is(join(' ', grep { !/^2|^4/ } keys %$statuses), '', 'no 5xx (nor a dropped request) during the failover');
is(switched(), 2, 'the switch is logged once per worker');
ok(eventually(30, sub { ($s->master_port // 0) == $r1->port }), 'the sentinels name r1');

ok(eventually(10, sub {
    get('flow', 'after')->status == 200 && $r1->counts('after');
}), 'requests are decided by the new master');
is(join(' ', map { get('limited', 'lim')->status } 1 .. 3), '200 200 429',
    'the limit continues from what the replica had: 2 more, then 429');
is($t->http_get('/trap', 'X-Client' => 'striker')->status, '404', 'the 3rd strike');
is(get('flow', 'striker')->status, '403', 'the strikes continued: the client is blocked');

# the old master comes back: the sentinels make it a replica; it is not used
$r0->start;
ok(eventually(20, sub { ($r0->cmd('ROLE') // [''])->[0] eq 'slave' }),
    'the old master came back as a replica');
is(get('flow', 'back')->status, 200, 'requests still decided');
ok(!$t->error_log_count(qr/READONLY/), 'never written to a replica');

# Every sentinel goes away: the master's connection does not depend on
# them, requests are still decided by it.  The workers go on trying the
# sentinels in turn, each time on a new connection: each sentinel's outage
# is logged once per worker (waited for by the failures counted in
# pow_shield_redis_errors_total), and its end once, when a worker reaches
# it again.

sub redis_errors { total(scrape($t), 'pow_shield_redis_errors_total') }

my $sentinel_down = qr/\[error\] (\d+)#.*redis sentinel 127\.0\.0\.1:(\d+) unavailable/;
my $errors = redis_errors();
$s->kill_sentinels;
ok(eventually(120, sub { redis_errors() >= $errors + 100 }),
    'the sentinels are gone: the workers tried them again and again (100 failed connections)');
ok(eventually(10, sub { get('flow', 'no-sentinels')->status == 200
    && $r1->counts('no-sentinels') }),
    '... requests are still decided by the master');
my %per = %{Test::PowShield::Sentinel::lines_per_worker($t, $sentinel_down)};
is(join(' ', grep { $per{$_} > 1 } sort keys %per), '',
    '... each sentinel\'s outage is logged once per worker, not per connection');
cmp_ok(scalar(keys %per), '<=', 6, '... at most 3 sentinels x 2 workers lines');
$s->start_sentinels;
ok(eventually(30, sub {
    my %w;
    for my $line ($t->error_log_lines) {
        $w{$1} = 1 if $line =~ /\[notice\] (\d+)#.*redis sentinel \S+ is available again/;
    }
    keys %w == 2;
}), 'the sentinels are back: each worker logs that it reached one again');

###############################################################################

$t->done_testing;
$s->stop;
