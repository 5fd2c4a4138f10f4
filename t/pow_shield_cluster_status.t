#!/usr/bin/perl

# pow_shield_status in cluster mode (docs/metrics.md, "Redis"): every
# command queued for Redis is counted, every reply is timed into the
# round-trip histogram, failures are counted by kind (io, timeout,
# protocol, handshake, reply; "refused" is in pow_shield_cluster_inflight.t),
# the fallback gauge is 1 while the worker decides without Redis and 0 once
# it is back, and each recovery counts a reconnect.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Test::PowShield qw(:pow :util :redis);
use Test::PowShield::Metrics qw(scrape metric delta promtool_check);

###############################################################################

my $t = Test::PowShield->new->require_redis;
$t->run_redis;

# one worker: one connection, one fallback state
my $conf = http_conf(<<'EOF', workers => 1);
    pow_shield_secret "cluster-status-suite-secret-0123456789";
    pow_shield_redis redis://127.0.0.1:REDIS timeout=500ms connect_timeout=500ms;

    server {
        %%TEST_SERVER%%

        add_header X-Result $pow_shield_result always;

        location /api/ {
            pow_shield_key $http_x_client;
            pow_shield_limit 100 1h;
        }

        location = /metrics {
            pow_shield_status;
        }
    }
EOF

(my $main = $conf) =~ s/REDIS/%%REDIS_PORT%%/;
$t->write_file_expand('nginx.conf', $main);
$t->write_file('html/api/data.json', qq({"ok":true}\n));
$t->run;

###############################################################################

sub get { $t->http_get('/api/data.json', 'X-Client' => $_[0]) }

sub wkey { client_key($_[0], 'w', 100, 3600000) }

my $RTT = 'pow_shield_redis_round_trip_seconds';

sub commands { metric($_[0], 'pow_shield_redis_commands_total') }
sub replies  { metric($_[0], "${RTT}_count") }
sub errors   { metric($_[0], 'pow_shield_redis_errors_total', kind => $_[1]) }
sub fallback { metric($_[0], 'pow_shield_redis_fallback_active') }

is(get('warm')->status, 200, 'Redis decides');

my $m = scrape($t);
cmp_ok(commands($m), '>=', 3, 'the handshake and the request were sent');
is(replies($m), commands($m), 'every command got a reply, timed');
is(metric($m, "${RTT}_bucket", le => '+Inf'), replies($m),
    'histogram: le="+Inf" is the count');
cmp_ok(metric($m, "${RTT}_sum"), '>', 0, 'histogram: the sum is the time');
is(errors($m, $_), 0, "no $_ errors") for qw(io timeout protocol handshake reply);
is(fallback($m), 0, 'fallback gauge 0: Redis answers');

SKIP: {
    my ($rc, $out) = promtool_check($m->{-text});
    skip "promtool: $out", 1 unless defined $rc;
    ok($rc == 0 && $out !~ /\S/, 'promtool check metrics: no problems')
        or diag($out);
}

# green requests: one EVALSHA each, each answered

my $before = scrape($t);
is(get("green-$_")->status, 200, "green $_") for 1 .. 10;
my $after = scrape($t);
is(delta($before, $after, 'pow_shield_redis_commands_total'), 10,
    '10 requests: 10 commands');
is(delta($before, $after, "${RTT}_count"), 10, '10 replies timed');
is(replies($after), commands($after),
    'histogram count == commands that got replies');

# an error reply fails that command only

$t->redis_cmd('SET', wkey('bad'), 'not a sorted set');
$before = scrape($t);
is(get('bad')->status, 200, 'WRONGTYPE: decided by the fallback');
$after = scrape($t);
is(delta($before, $after, 'pow_shield_redis_errors_total', kind => 'reply'), 1,
    'an error reply: kind="reply"');
is(delta($before, $after, "${RTT}_count"), 1, 'an error reply is a reply');
is(fallback($after), 0, 'the connection stays: fallback gauge 0');

# Redis stalls: a timeout, the fallback decides until Redis is back

$before = scrape($t);
$t->pause_redis;
is(get('stalled')->status, 200, 'Redis stalled: decided by the fallback');
$m = scrape($t);
is(delta($before, $m, 'pow_shield_redis_errors_total', kind => 'timeout'), 1,
    'the reply timed out: kind="timeout"');
is(fallback($m), 1, 'fallback gauge 1 while Redis is unavailable');
$t->resume_redis;
ok(eventually(10, sub { get('probe'); fallback(scrape($t)) == 0 }),
    'Redis resumed: fallback gauge back to 0');
$after = scrape($t);
is(delta($before, $after, 'pow_shield_redis_reconnects_total'), 1,
    'one reconnect');

# Redis dies: io errors, the fallback decides until it is restarted

$before = scrape($t);
$t->kill_redis;
ok(eventually(10, sub { get('dead'); fallback(scrape($t)) == 1 }),
    'Redis dead: fallback gauge 1');
$m = scrape($t);
cmp_ok(delta($before, $m, 'pow_shield_redis_errors_total', kind => 'io'), '>=',
    1, 'the refused connection: kind="io"');
$t->restart_redis;
ok(eventually(10, sub { get('probe'); fallback(scrape($t)) == 0 }),
    'Redis restarted: fallback gauge back to 0');
$after = scrape($t);
is(delta($before, $after, 'pow_shield_redis_reconnects_total'), 1,
    'one more reconnect');

###############################################################################

# peers that are not the Redis we expect: a handshake refused, garbage

my %peers = (
    handshake => "-ERR unknown command\r\n",
    protocol => "HTTP/1.1 400 Bad Request\r\n\r\n",
);

for my $kind (sort keys %peers) {
    my $n = Test::PowShield->new;
    my $port = $n->port(8091);
    fake_peer($port, $peers{$kind});
    (my $c = $conf) =~ s/REDIS/$port/;
    $n->write_file_expand('nginx.conf', $c);
    $n->write_file('html/api/data.json', qq({"ok":true}\n));
    $n->run;
    is($n->http_get('/api/data.json', 'X-Client' => 'x')->status, 200,
        "$kind: decided by the fallback");
    ok(eventually(10, sub {
        (metric(scrape($n), 'pow_shield_redis_errors_total', kind => $kind)
            // 0) >= 1 }), "$kind: counted as kind=\"$kind\"");
    is(fallback(scrape($n)), 1, "$kind: fallback gauge 1");
}

###############################################################################

$t->done_testing;
