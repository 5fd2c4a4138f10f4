#!/usr/bin/perl

# pow_shield_limit <n> <window> approx: cluster mode counts with the
# sliding-window counter (docs/directives.md "pow_shield_limit", the
# module's approx script (objs/pow_shield_scripts approx)): one small hash per client instead
# of a sorted set, the same 429 past the limit.  Then the script itself at a clock the test sets: the previous
# fixed window weighs by the share of it still inside the sliding window,
# and the documented error bound holds (at most the limit per fixed window,
# at most twice the limit within any window-long span).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Digest::SHA qw(sha1_hex);
use Test::More;
use Test::PowShield qw(:redis http_conf);

###############################################################################

my $t = Test::PowShield->new->require_redis;
$t->run_redis;

$t->write_file_expand('nginx.conf', http_conf(<<"EOF", workers => 1));
    pow_shield_secret "cluster-approx-suite-secret-0123456789";
    pow_shield_redis redis://127.0.0.1:%%REDIS_PORT%% timeout=3s;
    pow_shield_key \$http_x_client;

    server {
        %%TEST_SERVER%%

        location = /approx {
            pow_shield_limit 3 1m approx;
        }
    }
EOF

$t->write_file('html/approx', "{}\n");
$t->run;

my @remaining = map {
    my $r = $t->http_get('/approx', 'X-Client' => 'counter');
    [$r->status, $r->header('X-RateLimit-Remaining')];
} 1 .. 4;
is_deeply(\@remaining, [[200, 2], [200, 1], [200, 0], [429, 0]],
    'approx: three requests pass with the remaining count, the fourth gets 429');

my $hash = client_key('counter', 'a', 3, 60000);
is($t->redis_cmd('TYPE', $hash), 'hash', "the client's state is one hash, $hash");
is_deeply([sort @{$t->redis_cmd('HKEYS', $hash)}], [qw(c i p)], 'of three fields');
is_deeply($t->redis_cmd('KEYS', client_key('counter', 'w', '*')), [],
    'and no sorted set');

# The script as the module sends it, checked to be the one loaded.
my $script = module_script('approx');
is_deeply($t->redis_cmd('SCRIPT', 'EXISTS', sha1_hex($script)), [1],
    'the script the composer prints is the one the module loaded');

# TIME answers what the hash "test:clock" holds.
my $clocked = "local real = redis\n"
    . "local redis = setmetatable({call = function(cmd, ...)\n"
    . "  if cmd == 'TIME' then return real.call('HMGET', 'test:clock', 's', 'us') end\n"
    . "  return real.call(cmd, ...)\nend}, {__index = real})\n" . $script;

my $BASE = 1_000_000_000;   # ms, a multiple of the window: a fixed window starts here
my $W = 1000;

# One request of client $case at $ms under a limit of $limit per $W ms.
sub at {
    my ($case, $limit, $ms) = @_;
    $t->redis_cmd('HSET', 'test:clock', 's', int($ms / 1000), 'us', ($ms % 1000) * 1000);
    return $t->redis_cmd('EVAL', $clocked, 5, "{t}:a:$case", "{t}:o:$case", "{t}:s:$case",
        "{t}:t:$case", "{t}:u:$case", $limit, $W, 'unused', 0, 0, 0, 0, 0, 1, 0);
}
# How many of $n requests at $ms are admitted.
sub admitted {
    my ($case, $limit, $ms, $n) = @_;
    return scalar grep { at($case, $limit, $ms)->[0] == 1 } 1 .. $n;
}

# {allowed, remaining, reset_after_ms, retry_after_ms, over, strikes, block,
#  block_ms, tripped, struck}
is_deeply(at('fresh', 3, $BASE + 250), [1, 2, 750 + $W, 0, 0, 0, 0, 0, 0, 0],
    'a new client: admitted, counted until the next fixed window ends');

is(admitted('weigh', 10, $BASE + 999, 10), 10, 'ten at the end of one window');
is_deeply(at('weigh', 10, $BASE + $W), [0, 0, $W, 1, 1, 0, 0, 0, 0, 0],
    'the next window starts with all ten counted: refused, retry in 1 ms');
is(admitted('weigh', 10, $BASE + $W + 500, 20), 5,
    'half way through, half of the previous window counts: five more');
is_deeply(at('weigh', 10, $BASE + $W + 500), [0, 0, 500 + $W, 1, 17, 0, 0, 0, 0, 0],
    'then refused until the previous share shrinks below one request (17th refusal)');

# The bound: bursts at the end of one window and all through the next.
my %per_window;
my @admitted_at;
for my $ms (map { $BASE + $_ } 999, 1000, 1001, 1300, 1600, 1999, 2000, 2500) {
    my $n = admitted('bound', 10, $ms, 30);
    $per_window{int($ms / $W)} += $n;
    push @admitted_at, [$ms, $n];
}
ok(!grep({ $_ > 10 } values %per_window), 'never more than the limit in one fixed window')
    or diag explain \%per_window;
my $worst = 0;
for my $start (map { $_->[0] } @admitted_at) {
    my $in = 0;
    $in += $_->[1] for grep { $_->[0] >= $start && $_->[0] < $start + $W } @admitted_at;
    $worst = $in if $in > $worst;
}
ok($worst <= 20, "never more than twice the limit within one window's span ($worst)");
ok($worst > 10, 'and more than the limit does happen: the bound is not the exact log\'s');

$t->done_testing;
