#!/usr/bin/perl

# SPEC section 5: a ban of a client key acts at every shielded location
# whose breaker counts that key, also at one without pow_shield_ban; and a
# breaker line's for= is how long the block really lasts (an earlier strike
# elsewhere, with a longer time, keeps it longer than this location's).
# In local mode and in cluster mode (Test::PowShield::Modes).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Test::PowShield qw(:pow :util);
use Test::PowShield::Modes;

###############################################################################

my $t;    # the node of the mode under test (each_mode below)

my $conf = http_conf(<<'EOF');
    %%REDIS%%
    pow_shield_secret "breaker-everywhere-suite-secret-0123456789";
    pow_shield_difficulty 1;
    pow_shield_key $http_x_client;

    server {
        %%TEST_SERVER%%

        location /ban/ {
            pow_shield_limit 1 1h;
            pow_shield_strikes 2 60s;
            pow_shield_ban 1h after=1;
        }

        # no pow_shield_ban here; the default strikes (5 60s)
        location /api/ {
            pow_shield_limit 100 1h;
        }

        # no breaker counts the key here
        location /open/ {
            pow_shield_limit 100 1h;
            pow_shield_strikes off;
        }

        location /long/ {
            pow_shield_limit 1 1h;
            pow_shield_strikes 100 60s;
        }

        location /short/ {
            pow_shield_limit 1 2h;
            pow_shield_strikes 2 3s;
        }
    }
EOF

my %files = map { ("html/$_/data.json" => qq({"dir":"$_"}\n)) } qw(ban api open long short);

sub get {
    my ($client, $dir) = @_;
    return $t->http_get("/$dir/data.json", 'X-Client' => $client);
}

###############################################################################

Test::PowShield::Modes->each_mode($conf, redis => 'timeout=3s', files => \%files, sub {
    my ($m) = @_;
    $t = $m->node(1);

    # banned at /ban/, then blocked at /api/ too

    is(get('banned', 'api')->status, 200, 'premise: the client is served at /api/');
    is(statuses(map { get('banned', 'ban') } 1 .. 4), '200 429 429 403',
        'premise: two offences at /ban/ open the breaker, which bans');
    my $r = get('banned', 'api');
    is($r->status, 403, 'a ban acts at a location without pow_shield_ban');
    is($r->header('X-PoW-Shield'), 'banned', '... with the ban\'s X-PoW-Shield');
    cmp_ok($r->header('Retry-After') // 0, '>', 3000, '... until the ban ends (1h)');
    is(get('banned', 'open')->status, 200,
        'not where no breaker counts the key (strikes off)');
    is(get('other', 'api')->status, 200, 'another client is served');

    # for= is the block's real length

    is(statuses(map { get('long', 'long') } 1 .. 2), '200 429',
        'premise: a strike at a location that remembers strikes for 60 s');
    is(statuses(map { get('long', 'short') } 1 .. 2), '200 429',
        'premise: the second strike, at a location of 2 strikes for 3 s, opens the breaker');
    my ($line) = $t->error_log_lines(qr/breaker opened: .*strikes=2 /);
    my ($for) = ($line // '') =~ /\bfor=(\d+)s\b/;
    cmp_ok($for // 0, '>=', 55, 'the breaker line says the block lasts about 60 s, not 3 s');
    $r = get('long', 'short');
    is($r->status, 403, 'premise: blocked');
    cmp_ok($r->header('Retry-After') // 0, '>=', 55, '... as long as the line said');
});

###############################################################################

Test::PowShield::Modes->done_testing;
