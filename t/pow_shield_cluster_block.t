#!/usr/bin/perl

# Cluster mode: blocking is cheap (docs/protocol.md §7.4).  A node that learns from
# Redis that a client is blocked keeps the block in its zone until it ends,
# so the client's further requests never reach Redis; the block still ends
# when Redis's does.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Test::PowShield qw(:pow :util :redis);

###############################################################################

my $t = Test::PowShield->new->require_redis;
$t->run_redis;

$t->write_file_expand('nginx.conf', http_conf(<<'EOF', workers => 2));
    pow_shield_secret "cluster-block-suite-secret-0123456789";
    pow_shield_redis redis://127.0.0.1:%%REDIS_PORT%% timeout=3s;

    server {
        %%TEST_SERVER%%

        add_header X-Result $pow_shield_result always;
        add_header X-Pid $pid always;

        pow_shield_key $http_x_client;
        pow_shield_strikes 3 3s;

        location /api/ {
            pow_shield_limit 100 1h;
        }

        location = /trap {
            pow_shield_trap;
        }
    }
EOF

$t->write_file('html/api/data.json', '{"ok":true}');
$t->run;

###############################################################################

sub api  { $t->http_get('/api/data.json', 'X-Client' => $_[0]) }
sub trap { $t->http_get('/trap', 'X-Client' => $_[0]) }

# calls of our scripts so far (EVALSHA, or EVAL after a script flush)
sub script_calls { $t->redis->calls(qw(evalsha eval)) }

is(api('warm')->status, 200, 'Redis answers');

is(statuses(map { trap('c') } 1 .. 3), '404 404 404', 'three trap hits: 404');
my $r = api('c');
is($r->status, 403, 'the client is blocked (Redis says so)');
is($r->header('X-PoW-Shield'), 'blocked', '... X-PoW-Shield: blocked');

# both workers learn the block from Redis at most once each; after that,
# the client's requests cost no Redis call at all (the kernel may hand
# a busy machine's connections all to one worker: ask until both answered)
my %answered;
for (1 .. 400) {
    my $b = api('c');
    $answered{ $b->header('X-Pid') // '' } = 1 if $b->status == 403;
    last if keys %answered >= 2;
}
is(scalar keys %answered, 2, 'both workers answered the blocked client');
my $before = script_calls();
my @blocked = map { api('c') } 1 .. 40;
is(statuses(@blocked), join(' ', ('403') x 40), '40 more requests: all blocked');
is(script_calls() - $before, 0, '... without a single script call to Redis');
is(trap('c')->status, 403, 'a trap hit while blocked: blocked, no Redis call');
is(script_calls() - $before, 0, '... still none');

# another client is decided by Redis as usual
is(api('other')->status, 200, 'another client: 200');
is(script_calls() - $before, 1, '... with one script call');

# the block ends with Redis's (3 s after the last strike)
ok(eventually(8, sub { api('c')->status == 200 }),
    'the block ends when it ends in Redis');
is($t->redis_cmd('EXISTS', client_key('c', 's')), 0,
    'Redis forgot the strikes too');

$t->done_testing;
