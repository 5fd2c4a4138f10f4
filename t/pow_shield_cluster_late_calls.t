#!/usr/bin/perl

# Calls Redis runs after the node gave up on them change nothing (SPEC §6;
# docs/operations.md, "Calls Redis runs late"; issue 37 point 2).
#
# One node of two workers, timeout=300ms, pow_shield_fail open, the default
# pow_shield_strikes 5 60s.  Two stacked limits, so that every request goes
# to Redis (neither refused on the node nor coalesced).  A client over its
# limit has 2 unpaid strikes in Redis; Redis is stopped (SIGSTOP) while 6
# more of its unpaid requests are in flight: the node gives up on them at
# the timeout and lets them through (fail open).  A worker's first check
# goes to Redis; the others wait behind it to go in one call
# (docs/operations.md, "Gathering") and, when it times out, fall back never
# sent: Redis receives one check per worker that had some.  Once resumed,
# Redis runs them (counted in INFO commandstats, its query buffers empty):
# each came after its deadline, so the client's strikes, unpaid strikes,
# log and refusals in Redis are what they were before the stall (without
# deadlines each would strike).  Its next request (once 429s
# strike again after the node's return) is a 429 with its third strike
# ($pow_shield_strikes), not a 403.
#
# No durations are asserted: Redis is known to have run the backlog by its
# own command counts, not by waiting.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Time::HiRes qw(sleep);
use Digest::SHA qw(sha1_hex);
use Test::PowShield qw(:pow :util :redis);

###############################################################################

my $t = Test::PowShield->new->require_redis;
$t->run_redis;

my $conf = http_conf(<<'EOF', workers => 2);
    pow_shield_secret "cluster-late-calls-suite-secret-01234567";
    pow_shield_redis redis://127.0.0.1:%%REDIS_PORT%% timeout=300ms;

    server {
        %%TEST_SERVER%%

        add_header X-Result $pow_shield_result always;
        add_header X-Strikes $pow_shield_strikes always;

        pow_shield_key $http_x_client;
        pow_shield_difficulty 1;

        location /open/ {
            pow_shield_limit 2 1h;
            pow_shield_limit 100 1h;
            pow_shield_fail open;
        }
    }
EOF

$t->write_file_expand('nginx.conf', $conf);
$t->write_file('html/open/data.json', qq({"ok":true}\n));
$t->run;

###############################################################################

my $IN_FLIGHT = 6;

sub get { $t->http_get('/open/data.json', 'X-Client' => $_[0]) }

sub send_req {
    my ($client) = @_;
    return $t->send_request("GET /open/data.json HTTP/1.0\r\nHost: localhost\r\n"
        . "X-Client: $client\r\n\r\n");
}

# What Redis holds of the client: strikes, unpaid strikes, the first
# limit's log and refusals.
sub held {
    my ($c) = @_;
    return join ' ', map { $_ // 0 } $t->redis_cmd('GET', client_key($c, 's')),
        $t->redis_cmd('GET', client_key($c, 'u')),
        $t->redis_cmd('ZCARD', client_key($c, 'w', 2, 3600000)),
        $t->redis_cmd('GET', client_key($c, 'o', 2, 3600000));
}

sub script_calls { $t->redis->calls(qw(evalsha eval)) }

# Both workers decide with Redis: fresh clients counted there

my $n = 0;
ok(eventually(30, sub {
        my $c = 'warm-' . $n++;
        get($c)->status == 200 && $t->redis_cmd('EXISTS', client_key($c, 'w', 2, 3600000));
    }), 'Redis decides');

# The client: 2 admitted, 2 refused (a strike each, unpaid)

my @r = map { get('late') } 1 .. 4;
is(statuses(@r), '200 200 429 429', 'over its limit: 429s');
is($r[3]->header('X-Strikes'), 2, '... 2 strikes');
# (The 4th was refused on the node, from Redis's refusal of the 3rd: its
# strike reaches Redis in the node's batch, within 100 ms.)
ok(eventually(5, sub { held('late') eq '2 2 2 2' }),
    'Redis holds 2 strikes, 2 unpaid, 2 admitted, 2 refusals')
    or diag('held: ' . held('late'));
my $before = held('late');
# Past `refusals::FRESH_MS` (500 ms) without Redis's word, the node no
# longer refuses the client itself: the next requests go to Redis.
sleep 0.7;

# Redis stops with the client's requests in flight: the node gives up on
# them at the timeout, and fail open lets them through

my $calls = script_calls();
# Every command Redis runs from here is kept in its slow log: which calls
# of the stacked script for this client it ran late is read back there.
$t->redis_cmd('CONFIG', 'SET', 'slowlog-max-len', 10000);
$t->redis_cmd('CONFIG', 'SET', 'slowlog-log-slower-than', 0);
$t->redis_cmd('SLOWLOG', 'RESET');
$t->pause_redis;
my @socks = map { send_req('late') } 1 .. $IN_FLIGHT;
my @during = map { $t->read_response($_) } @socks;
is(statuses(@during), join(' ', ('200') x $IN_FLIGHT),
    "$IN_FLIGHT requests in flight while Redis is stopped: fail open lets them through");
diag('while stopped: ' . join(', ', map { $_->status . ' ' . ($_->header('X-Result') // '-') }
    @during));

# Redis resumes and runs what it had received

$t->resume_redis;
# Every connection's query buffer empty: Redis ran what it had received.
sub all_read {
    my @others = grep { !/\bcmd=client\|list\b/ } split /\n/, $t->redis_cmd('CLIENT', 'LIST') // '';
    return @others && !grep { /\bqbuf=[1-9]/ } @others;
}
ok(eventually(30, sub { script_calls() >= $calls + 1 && all_read() }),
    'Redis ran the calls it received while stopped (one a worker at most: the others waited)')
    or diag('script calls since: ' . (script_calls() - $calls));
diag('script calls Redis ran since the stall began: ' . (script_calls() - $calls));
# The client's checks among them: calls of the stacked script (by its
# SHA) that name the client's strikes key.
my $stacked = sha1_hex(Test::PowShield::Redis::module_script('stacked'));
my $strikes = client_key('late', 's');
my $late = grep {
    my @args = @{$_->[3] // []};
    @args > 2 && lc $args[0] eq 'evalsha' && $args[1] eq $stacked && grep { $_ eq $strikes } @args
} @{$t->redis_cmd('SLOWLOG', 'GET', 10000) // []};
$t->redis_cmd('CONFIG', 'SET', 'slowlog-log-slower-than', 10000);
ok($late >= 1 && $late <= 2,
    "... of the client's $IN_FLIGHT checks, Redis ran one a worker at most, late (the others waited behind it and fell back never sent)")
    or diag("the client's stacked calls Redis ran: $late");
is(held('late'), $before,
    "... late: the client's strikes, unpaid strikes, log and refusals are unchanged");

# Redis decides again (polled with fresh clients until a 429 strikes: within
# 3 s of the node's return none does, docs/operations.md): the client is
# refused, not blocked, with its third strike

$n = 0;
ok(eventually(30, sub {
        my $c = 'again-' . $n++;
        get($c) for 1 .. 3;
        ($t->redis_cmd('GET', client_key($c, 's')) // 0) == 1;
    }), 'Redis decides again, and an unpaid 429 strikes again');
my $back = get('late');
is($back->status, 429, 'the client: a 429, not a 403')
    or diag('result: ' . ($back->header('X-Result') // '-'));
is($back->header('X-Strikes'), 3, '... its third strike');
is($t->redis_cmd('GET', client_key('late', 's')), 3, '... as Redis counts it');

###############################################################################

$t->done_testing;
