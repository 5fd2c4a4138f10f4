#!/usr/bin/perl

# Cluster mode, a hung Redis: a request the fail policy decides once the
# reply deadline passes is counted under its own key and its own
# location's limits (store::Lent: read where the request keeps them), even
# in the waiter an earlier request of another client and location used.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Test::PowShield qw(:pow :util :redis);

###############################################################################

my $t = Test::PowShield->new->require_redis;
$t->run_redis;

$t->write_file_expand('nginx.conf', http_conf(<<'EOF', workers => 1));
    pow_shield_secret "cluster-lent-suite-secret-0123456789ab";
    pow_shield_redis redis://127.0.0.1:%%REDIS_PORT%% timeout=1s connect_timeout=1s;

    server {
        %%TEST_SERVER%%

        pow_shield_key $http_x_client;
        pow_shield_difficulty 1;

        location /wide/ {
            pow_shield_limit 100 1h;
        }

        location /tight/ {
            pow_shield_limit 1 1h;
        }

        location /tenant/ {
            pow_shield_limit 1 1h key=$http_x_tenant;
        }
    }
EOF
$t->write_file("html/$_/data.json", "{}\n") for qw(wide tight tenant);
$t->run;

###############################################################################

sub send_req {
    my ($loc, $client, $tenant) = @_;
    return $t->send_request("GET /$loc/data.json HTTP/1.0\r\nHost: localhost\r\n"
        . "X-Client: $client\r\nX-Tenant: " . ($tenant // 'none') . "\r\n\r\n");
}

# Redis answers: the worker's waiter is kept for the next request
is($t->http_get('/wide/data.json', 'X-Client' => 'an-earlier-client-of-wide')->status, 200,
    'Redis up: 200');

$t->pause_redis;
my @w = map { send_req('tight', 'late') } 1 .. 2;
Time::HiRes::sleep(0.3);
is(scalar(grep { answered($_) } @w), 0, 'Redis hung: both wait');
is(statuses(map { $t->read_response($_) } @w), '200 429',
    'at the deadline, fail local: counted under their key and limit 1');
$t->resume_redis;

# the same for a limit's key= values: counted per tenant
ok(eventually(15, sub {
        $t->http_get('/wide/data.json', 'X-Client' => 'back')->status == 200
            && $t->redis_cmd('EXISTS', client_key('back', 'w', 100, 3600000));
    }), 'Redis answers again');
$t->pause_redis;
@w = map { send_req('tenant', "client-$_", 'acme') } 1 .. 2;
Time::HiRes::sleep(0.3);
is(statuses(map { $t->read_response($_) } @w), '200 429',
    'at the deadline, fail local: two clients of one tenant counted under its key= value');
$t->resume_redis;

###############################################################################

$t->done_testing;
