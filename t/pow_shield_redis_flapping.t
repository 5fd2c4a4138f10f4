#!/usr/bin/perl

# A Redis a little slower than timeout= (docs/operations.md, "When Redis
# fails"): it answers the handshake, whose deadline includes
# connect_timeout=, but no request in time.  Recovery is declared only once
# a command's reply arrives within its request deadline, so such a Redis is
# one outage, logged once, retried with a growing back-off: no
# "unavailable" / "available again" pair every second, no request let
# through uncounted.  Once Redis answers in time again, recovery is logged
# once.
#
# No durations are asserted: only log lines counted after a number of
# requests, and the outcomes.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Time::HiRes ();
use Test::PowShield qw(:pow :util :redis);

###############################################################################

my $t = Test::PowShield->new->require_redis;
$t->run_redis;
my $proxy_port = $t->port('slow');

# replies 300ms late; requests are due after 100ms, handshakes after 1.1s
my $proxy = slow_proxy($proxy_port, $t->redis->port, 0.3);

$t->write_file_expand('nginx.conf', http_conf(<<"EOF", workers => 1));
    pow_shield_secret "redis-flapping-suite-secret-0123456789";
    pow_shield_redis redis://127.0.0.1:$proxy_port timeout=100ms connect_timeout=1s;

    server {
        %%TEST_SERVER%%

        location /api/ {
            pow_shield_key \$http_x_client;
            pow_shield_limit 1000 1h;
        }
    }
EOF
$t->write_file('html/api/data.json', qq({"ok":true}\n));
$t->run;

###############################################################################

sub get { $t->http_get('/api/data.json', 'X-Client' => 'a')->status // 'none' }

# 30 requests over about 3 seconds: before, each handshake was taken for a
# recovery and the next request timed out again
my @statuses;
for (1 .. 30) {
    push @statuses, get();
    Time::HiRes::sleep(0.1);
}
is(join(' ', @statuses), join(' ', ('200') x 30),
    'a slow Redis: every request decided by pow_shield_fail (local)');
is($t->redis_unavailable_count, 1, 'a slow Redis is one outage, logged once');
is($t->redis_available_again_count, 0,
    '... and never taken for a recovery on a handshake alone');

# Redis answers in time again
kill_peer($proxy);
$proxy = slow_proxy($proxy_port, $t->redis->port, 0);
ok(eventually(10, sub {
    get();
    $t->redis_available_again_count == 1;
}), 'Redis answering in time: recovery logged once');
ok(eventually(5, sub { @{$t->redis_cmd('KEYS', 'pow:*') // []} > 0 }),
    '... and decided by Redis again');
is($t->redis_unavailable_count, 1, '... with no further outage logged');

###############################################################################

$t->done_testing;
