#!/usr/bin/perl

# State survives "nginx -s reload" (HUP) when the zone size is unchanged
# (docs/operations.md, "Sizing the zone"): the leaky buckets and the
# replay cache live in the shared-memory zone.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Test::PowShield qw(:pow http_conf);

###############################################################################

my $t = Test::PowShield->new;

$t->write_file_expand('nginx.conf', http_conf(<<'EOF'));
    pow_shield_secret "reload-suite-secret-0123456789abcdef";
    pow_shield_zone 1m;

    server {
        %%TEST_SERVER%%

        location /api/ {
            pow_shield_limit 2 1h;
            pow_shield_difficulty 1;
            pow_shield_key $http_x_client;
        }
    }
EOF

$t->write_file('html/api/data.json', qq({"ok":true}\n));

$t->run;

###############################################################################

sub get {
    my ($client, %h) = @_;
    return $t->http_get('/api/data.json', 'X-Client' => $client, %h);
}

# an exhausted client

is(get('spent')->status, 200, 'request 1 of 2: 200');
is(get('spent')->status, 200, 'request 2 of 2: 200');
is(get('spent')->status, 429, 'request 3: 429');

# a client with one request left

is(get('half')->header('X-RateLimit-Remaining'), 1, 'half: 1 remaining');

# a solved and spent challenge

get('replay') for 1 .. 2;
my $r = get('replay');
my %sol = solution($r);
is(get('replay', %sol)->status, 200, 'challenge solved before the reload');

my @workers = $t->worker_pids;
ok($t->reload, 'reload (HUP), same zone size');
isnt(join(',', $t->worker_pids), join(',', @workers), 'workers replaced');

# the bucket survives: still over the limit

$r = get('spent');
is($r->status, 429, 'exhausted client: still 429 after the reload');
is($r->header('X-RateLimit-Remaining'), 0, 'exhausted client: Remaining 0');

$r = get('half');
is($r->status, 200, 'half-used client: passes after the reload');
is($r->header('X-RateLimit-Remaining'), 0,
    'half-used client: the request before the reload still counts');

# the replay cache survives

$r = get('replay', %sol);
is($r->status, 409, 'solution spent before the reload: 409 after it');

# and a second reload

ok($t->reload, 'second reload');
is(get('spent')->status, 429, 'exhausted client: 429 after two reloads');

# a new client after the reload starts fresh

is(get('new')->header('X-RateLimit-Remaining'), 1, 'new client: fresh bucket');

# a worker killed by a signal is replaced by the master; the new worker
# uses the same zone (nginx releases the zone's lock of a dead worker)

$t->allow_alert(qr/worker process \d+ exited on signal 9/);
my ($victim) = $t->worker_pids;
kill 'KILL', $victim;
my $deadline = time + 10;
sleep 1 while time < $deadline
    && !grep({ $_ != $victim } $t->worker_pids);
ok(scalar(grep { $_ != $victim } $t->worker_pids), 'a new worker was started');
is(get('spent')->status, 429, 'after a worker crash: the bucket is kept');
is(get('after-crash')->header('X-RateLimit-Remaining'), 1,
    'after a worker crash: new clients are counted');

###############################################################################

$t->done_testing;
