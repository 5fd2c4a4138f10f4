#!/usr/bin/perl

# A Redis Cluster's slot generation and the breaker (issue 18, from
# review): a solved, never spent token of an older slot generation (the
# slot's master was flushed since), sent again and again by a client over
# its limit, is unpaid from the start: each is a strike, and the client is
# blocked as any client ignoring its challenges.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Test::PowShield qw(:pow :util :redis);

###############################################################################

my @n = map { Test::PowShield->new->require_redis } 1 .. 3;
plan(skip_all => 'redis-cli not found') unless `redis-cli --version 2>/dev/null`;
my @r = run_redis_cluster(@n[0 .. 2]);
my @ports = map { $_->port } @r;
my $t = $n[0];
$t->write_file_expand('nginx.conf', http_conf(<<"EOC", workers => 1));
    pow_shield_secret "cluster-old-generation-secret-012345";
    pow_shield_redis redis://127.0.0.1:$ports[0],redis://127.0.0.1:$ports[1] cluster timeout=1s;
    pow_shield_fail local;
    server {
        %%TEST_SERVER%%
        add_header X-Result \$pow_shield_result always;
        pow_shield_key \$http_x_client;
        pow_shield_difficulty 1;
        pow_shield_challenge_ttl 1h;
        location /api/ {
            pow_shield_limit 1 1h;
            pow_shield_strikes 3 1h;
        }
    }
EOC
$t->write_file('html/api/data.json', qq({"ok":true}\n));
$t->run;
sub get { my ($c, %h) = @_; $t->http_get('/api/data.json', 'X-Client' => $c, %h) }
sub owner { $r[0]->slot_owner($r[0]->cmd('CLUSTER', 'KEYSLOT', client_key($_[0], 's')), @r) }

my @x = (get('x'), get('x'));
is(statuses(@x), '200 429', '1 admitted, then 429');
my %sol = solution($x[1]);
# the slot's generation changes (a flush of its master) before the client pays
$r[owner('x')]->cmd('FLUSHALL');
my @s = map { my $y = get('x', %sol); $y->status . '/' . ($y->header('X-Result') // '') } 1 .. 12;
like("@s", qr{^(?:\S+ ){1,4}403/blocked}, "one old-generation solution sent 12 times: blocked after a few strikes (@s)");
$t->done_testing;
