#!/usr/bin/perl

# Cluster mode when Redis answers some commands with an error
# (docs/operations.md "Choosing a fail policy"): a key of the wrong type, a replica after a
# failover, OOM.  Only the request whose command got the error is decided
# by pow_shield_fail; the connection stays up for everyone else, and the
# error is logged once per kind, not per request.  Long client keys are
# hashed into short Redis keys ("#" and the base64url of their SHA-256).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Test::PowShield qw(:pow :util :redis);

###############################################################################

my $t = Test::PowShield->new->require_redis;
$t->run_redis;

# one worker: both clients share its Redis connection
$t->write_file_expand('nginx.conf', http_conf(<<'EOF', workers => 1));
    pow_shield_secret "cluster-errors-suite-secret-0123456789";
    pow_shield_redis redis://127.0.0.1:%%REDIS_PORT%% timeout=3s;

    server {
        %%TEST_SERVER%%

        add_header X-Result $pow_shield_result always;

        pow_shield_key $http_x_client;

        location /api/ {
            pow_shield_limit 3 1h;
            # distinguishable from Redis's decision: everything passes
            pow_shield_fail open;
        }
    }
EOF
$t->write_file('html/api/data.json', '{"ok":true}');
$t->run;

###############################################################################

sub get { $t->http_get('/api/data.json', 'X-Client' => $_[0]) }

sub wkey { client_key($_[0], 'w', 3, 3600000) }

# a 4 KB client key: the Redis key holds its hash ("#" and the base64url
# of its SHA-256), not the key

my $long = 'k' x 4096;
is(get($long)->status, 200, '4 KB client key: counted');
my @keys = grep { /:w:3:3600000$/ } @{$t->redis_cmd('KEYS', '*') || []};
my @hashed = grep { /^pow:\{#[A-Za-z0-9_-]{43}\}:w:3:3600000$/ } @keys;
is(scalar @hashed, 1, '4 KB client key: one window key, hashed in its hash tag')
    or diag(join ' ', map { length } @keys);
is($hashed[0], wkey($long), '... as the docs say (client_key)');
ok(!grep({ length > 90 } @keys), 'no Redis key longer than 90 bytes');

# the window key of client "bad" holds a string: its script calls fail with
# WRONGTYPE

$t->redis_cmd('SET', wkey('bad'), 'not a sorted set');

my (@bad, @good);
for (1 .. 5) {
    push @bad, get('bad');
    push @good, get('good');
}
is(statuses(@bad), '200 200 200 200 200',
    'WRONGTYPE: that client is decided by pow_shield_fail (open)');
is(statuses(@good), '200 200 200 429 429',
    'another client on the same connection is still decided by Redis');
is($t->redis_cmd('ZCARD', wkey('good')), 3, 'its window is in Redis');

my @kind = $t->error_log_lines(qr/pow_shield: redis \S+ answered WRONGTYPE errors/);
is(scalar @kind, 1, 'WRONGTYPE logged once, not per request');
is($t->redis_unavailable_count, 0,
    'an error reply does not drop the connection');

###############################################################################

$t->done_testing;
