#!/usr/bin/perl

# The sliding-window script itself, at a clock the test sets: exact to the
# millisecond at the window's edge (docs/directives.md, pow_shield_limit: an entry admitted at t
# counts while now < t + window), whichever path the script takes (no key,
# oldest entry inside the window, some or all entries gone).  The script
# text is the module's own (objs/pow_shield_scripts window) and checked
# to be the one the module loads into Redis; a local `redis` shadowing the global one answers
# TIME with the test's clock and passes every other call through.

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
    pow_shield_secret "cluster-window-suite-secret-0123456789";
    pow_shield_redis redis://127.0.0.1:%%REDIS_PORT%% timeout=3s;

    server {
        %%TEST_SERVER%%

        location = /probe {
            pow_shield_limit 10 1m;
        }
    }
EOF

$t->write_file('html/probe', "{}\n");
$t->run;

# The script as the module sends it (objs/pow_shield_scripts window).
my $script = module_script('window');
is($t->http_get('/probe')->status, 200,
    'a request Redis decided: the module has loaded its scripts');
is_deeply($t->redis_cmd('SCRIPT', 'EXISTS', sha1_hex($script)), [1],
    'the script the composer prints is the one the module loaded');

# TIME answers 1e6 s + 250 us: now = 1_000_000_000 ms (the us below 1 ms
# are dropped).
my $NOW = 1_000_000_000;
my $W = 1000;
my $clocked = "local redis = setmetatable({call = function(cmd, ...)\n"
    . "  if cmd == 'TIME' then return {'1000000', '250'} end\n"
    . "  return redis.call(cmd, ...)\nend}, {__index = redis})\n" . $script;

my $n = 0;
# Runs the script for key "w:$case" under a limit of $limit per $W ms, after
# seeding the key with entries at the given scores; returns its reply.
sub check {
    my ($case, $limit, @scores) = @_;
    my $key = "{t}:w:$case";
    $t->redis_cmd('DEL', $key);
    $t->redis_cmd('ZADD', $key, $_, "seed-$_") for @scores;
    $n++;
    return $t->redis_cmd('EVAL', $clocked, 5, $key, "{t}:o:$case", "{t}:s:$case", "{t}:t:$case", "{t}:u:$case",
        $limit, $W, "member-$n", 1, 5, 60000, 0, 0, 1, 0);
}
sub card { $t->redis_cmd('ZCARD', "{t}:w:$_[0]") }

# {allowed, remaining, reset_after_ms, retry_after_ms, over, strikes, block,
#  block_ms, tripped, struck}
is_deeply(check('empty', 3), [1, 2, $W, 0, 0, 0, 0, 0, 0, 0],
    'no key: admitted, the new entry leaves one window from now');
ok($t->redis_cmd('PTTL', '{t}:w:empty') > 0, 'the admitted key expires');

is_deeply(check('edge', 2, $NOW - $W, $NOW - $W + 1), [1, 0, 1, 0, 0, 0, 0, 0, 0, 0],
    'an entry one window old has left, one a ms younger still counts');
is(card('edge'), 2, 'the entry one window old was trimmed, the younger one kept');

is_deeply(check('edge_full', 1, $NOW - $W + 1), [0, 0, 1, 1, 1, 1, 0, 0, 0, 1],
    'at the limit a ms before the oldest leaves: refused (a strike), retry in 1 ms');
is(card('edge_full'), 1, 'a refusal adds no entry');

is_deeply(check('edge_free', 1, $NOW - $W), [1, 0, $W, 0, 0, 0, 0, 0, 0, 0],
    'at the limit the ms the oldest leaves: admitted');

is_deeply(check('inside', 5, $NOW - 500, $NOW - 100), [1, 2, 500, 0, 0, 0, 0, 0, 0, 0],
    'oldest inside the window: counted, reset when it leaves');
is(card('inside'), 3, 'nothing trimmed while the oldest is inside');

is_deeply(check('partial', 3, $NOW - 2000, $NOW - 1000, $NOW - 999, $NOW - 1),
    [1, 0, 1, 0, 0, 0, 0, 0, 0, 0], 'some gone: the next oldest decides the reset');
is(card('partial'), 3, 'exactly the entries one window old or more were trimmed');

is_deeply(check('all_gone', 1, $NOW - 5000, $NOW - 1000), [1, 0, $W, 0, 0, 0, 0, 0, 0, 0],
    'all gone: admitted as if new');

is_deeply(check('lowered', 2, $NOW - 900, $NOW - 800, $NOW - 700, $NOW - 600),
    [0, 0, 100, 300, 1, 1, 0, 0, 0, 1],
    'limit lowered below the count: retry when enough entries left, not the oldest');

# (ARGV[9] the requests a call decides, ARGV[10] its deadline: 0, none.)
# a coalesced call for k requests of one client (ARGV[9]): up to the free
# slots admitted, each with its own member, the rest refused, a strike
# each until the one that reaches the threshold (5)
{
    my $key = '{t}:w:k';
    $t->redis_cmd('DEL', $key, '{t}:s:k');
    $t->redis_cmd('ZADD', $key, $NOW - 100, 'seed');
    is_deeply($t->redis_cmd('EVAL', $clocked, 5, $key, '{t}:o:k', '{t}:s:k', '{t}:t:k', '{t}:u:k',
            4, $W, 'm', 1, 5, 60000, 0, 0, 10, 0),
        [3, 0, 900, 900, 5, 5, 0, 60000, 1, 5],
        'k = 10, 3 free slots: 3 admitted, 5 of the 7 refused struck (the 5th opens) and counted as refusals, 2 blocked and not');
    is(card('k'), 4, '3 new members, one per admitted request');
    is($t->redis_cmd('GET', '{t}:s:k'), 5, 'strikes stop at the threshold');
}

$t->done_testing;
