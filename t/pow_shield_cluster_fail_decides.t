#!/usr/bin/perl

# While Redis is unavailable, pow_shield_fail decides (SPEC 6; docs/operations.md,
# "Choosing a fail policy"), whatever the node knew of the client from Redis
# a moment before: under `open` a client the node refused (its 429 cached
# until T) or blocked passes; under `closed` a refused client gets the
# policy's 503 (a trusted one passes), while a block Redis reported holds;
# under `local` the zone decides, a block Redis reported included.  Redis
# is killed right after the node learnt each client: the workers see their
# idle connection close, which alone does not say Redis is gone.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Test::PowShield qw(:pow :util :redis);
use Test::PowShield::Modes;

###############################################################################

my $conf = http_conf(<<'EOF', workers => 2);
    pow_shield_secret "cluster-fail-decides-secret-01234567";
    pow_shield_redis redis://127.0.0.1:%%REDIS_PORT%% timeout=100ms;

    server {
        %%TEST_SERVER%%

        add_header X-Result $pow_shield_result always;
        pow_shield_key $http_x_client;
        pow_shield_difficulty 1;

        # the issue's location (37 point 8): default strikes (5 60s)
        location = /open {
            pow_shield_limit 3 1m;
            pow_shield_fail open;
        }

        # no strikes: nothing ever sends the client to Redis again until T
        location /open-quiet/ {
            pow_shield_limit 3 1m;
            pow_shield_strikes off;
            pow_shield_fail open;
        }

        location /open-block/ {
            pow_shield_limit 3 1m;
            pow_shield_strikes 2 1h;
            pow_shield_fail open;
        }

        location /closed/ {
            pow_shield_limit 3 1m;
            pow_shield_strikes 1000 1h;
            pow_shield_fail closed trusted=$http_x_trusted;
        }

        location /closed-block/ {
            pow_shield_limit 3 1m;
            pow_shield_strikes 2 1h;
            pow_shield_fail closed trusted=$http_x_trusted;
        }

        location /local-block/ {
            pow_shield_limit 3 1m;
            pow_shield_strikes 2 1h;
            pow_shield_fail local;
        }
    }
EOF

my ($n1) = Test::PowShield::Modes->cluster_only($conf, nodes => 1,
    files => { 'html/open' => qq({"ok":true}\n),
        map { ("html/$_/data.json" => qq({"ok":true}\n)) } qw(open-quiet open-block closed closed-block local-block) })->nodes;

sub get {
    my ($path, $client, %h) = @_;
    return $n1->http_get($path, 'X-Client' => $client, %h);
}

# A client Redis refused (its 4th request): the node keeps the refusal until T.
sub refused {
    my ($path, $client) = @_;
    my @r = map { get($path, $client) } 1 .. 4;
    return statuses(@r);
}

# A client blocked by Redis (strikes 2: its 429s and the strike that
# reaches 2), the block known to the node.
sub blocked {
    my ($path, $client) = @_;
    my @r;
    for (1 .. 10) {
        push @r, get($path, $client);
        last if $r[-1]->status == 403;
    }
    return $r[-1]->status;
}

###############################################################################

# Redis up: it decides, and the node learns each client

is(refused('/open', 'issue'), '200 200 200 429', 'premise: open: refused once');
is(refused('/open-quiet/data.json', 'quiet'), '200 200 200 429',
    'premise: open, no strikes: refused once');
is(refused('/closed/data.json', 'closed-refused'), '200 200 200 429',
    'premise: closed: refused once');
is(refused('/closed/data.json', 'trusted-refused'), '200 200 200 429',
    'premise: closed, trusted: refused once');
is(blocked('/open-block/data.json', 'open-blocked'), 403, 'premise: open: blocked');
is(blocked('/closed-block/data.json', 'closed-blocked'), 403, 'premise: closed: blocked');
is(blocked('/local-block/data.json', 'local-blocked'), 403, 'premise: local: blocked');

$n1->kill_redis;

# open: everything passes, as for a client Redis never refused

{
    my @r = map { get('/open', 'issue') } 1 .. 10;
    is(statuses(@r), join(' ', ('200') x 10),
        'fail open: 10 requests of a client refused just before Redis is killed all pass');
    ok(!grep({ $_->has_header('X-RateLimit-Limit') } @r),
        'fail open: no rate-limit headers (the node did not decide)');
}
is(statuses(map { get('/open-quiet/data.json', 'quiet') } 1 .. 10), join(' ', ('200') x 10),
    'fail open, no strikes: 10 requests of a refused client all pass');
is(statuses(map { get('/open-block/data.json', 'open-blocked') } 1 .. 3), '200 200 200',
    'fail open: a client Redis blocked passes (deciding on the node is local\'s)');

# closed: the policy's 503 (trusted: through), but a block Redis reported holds

{
    my $r = get('/closed/data.json', 'closed-refused');
    is($r->status, 503, 'fail closed: a refused client gets the policy\'s 503, not a 429');
    ok(!$r->has_header('X-PoW-Challenge'), 'fail closed: no challenge it could not pay');
}
is(get('/closed/data.json', 'trusted-refused', 'X-Trusted' => 1)->status, 200,
    'fail closed trusted=: a refused trusted client passes');
is(statuses(map { get('/closed-block/data.json', 'closed-blocked', 'X-Trusted' => $_) } 0, 1),
    '403 403', 'fail closed: a block Redis reported holds, trusted or not');

# local: the zone decides, a block Redis reported included

is(get('/local-block/data.json', 'local-blocked')->status, 403,
    'fail local: a block Redis reported holds');

###############################################################################

Test::PowShield::Modes->done_testing;
