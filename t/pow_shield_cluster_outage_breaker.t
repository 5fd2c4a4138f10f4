#!/usr/bin/perl

# The breaker through a Redis outage in cluster mode (issue 17, from
# review; issue 26): while Redis is unavailable pow_shield_fail decides, so
# under `local` a client that pays every challenge is not blocked once
# Redis is back; the zone standing in for Redis counts no strike for an
# unpaid 429 (Redis would not confirm it: SPEC 5), so one that ignores its
# challenges is refused, never admitted beyond its limit, and blocked once
# Redis decides again.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Test::PowShield qw(:pow :util :redis);
use Test::PowShield::Modes;

###############################################################################

my $conf = http_conf(<<'EOF', workers => 1);
    pow_shield_secret "cluster-outage-breaker-secret-012345";
    pow_shield_redis redis://127.0.0.1:%%REDIS_PORT%% timeout=300ms;

    server {
        %%TEST_SERVER%%

        add_header X-Result $pow_shield_result always;
        pow_shield_key $http_x_client;
        pow_shield_difficulty 1;
        pow_shield_challenge_ttl 1h;

        location /p/ {
            pow_shield_limit 1 1h;
            pow_shield_strikes 3 1h;
            pow_shield_fail local;
        }
    }
EOF

my ($n1) = Test::PowShield::Modes->cluster_only($conf, nodes => 1,
    files => { 'html/p/data.json' => qq({"ok":true}\n) })->nodes;

sub get {
    my ($client, %h) = @_;
    return $n1->http_get('/p/data.json', 'X-Client' => $client, %h);
}

###############################################################################

# Redis refuses both clients, then freezes (it keeps its data); the node
# notices once other clients' requests time out

for my $c (qw(payer ignorer)) {
    my @r = (get($c), get($c));
    is(statuses(@r), '200 429', "$c: 1 admitted, then refused by Redis");
    is(get($c, solution($r[1]))->status, 200, "$c: paid: 200");
}
$n1->pause_redis;
get("probe-$_") for 1 .. 3;

my (@paid, @ignored);
for (1 .. 8) {
    my $x = get('payer');
    push @paid, $x->status;
    push @paid, get('payer', solution($x))->status if $x->status == 429;
    push @ignored, get('ignorer')->status;
}
unlike("@paid", qr/403/, "the outage: the payer pays its challenges, never blocked (@paid)");
like("@ignored", qr/^(?:200 )?429(?: 429)*$/,
    "the outage: a client ignoring challenges is refused, no strike (@ignored)");

$n1->resume_redis;
ok(eventually(10, sub {
        get('probe-back');
        ($n1->redis_cmd('EXISTS', client_key('probe-back', 'w', 1, 3600000)) // 0) == 1 }),
    'Redis back: the node asks it again');
Time::HiRes::sleep(0.5);
my @after = map { get('payer')->status } 1 .. 2;
unlike("@after", qr/403/, "a client that paid every challenge during the outage is not blocked after it (@after)");
ok(eventually(20, sub { get('ignorer')->status == 403 }),
    'Redis back: the client that keeps ignoring its challenges is blocked');

###############################################################################

$n1->done_testing;
