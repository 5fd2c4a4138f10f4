#!/usr/bin/perl

# Client keys a request controls (a header, an argument) never share state
# with the default key, the client address: a client that sends someone's
# address as its API key gets only its own API-key strikes and count, and
# never blocks (or bans, or counts against) that address.
#
# In local mode and in cluster mode (Test::PowShield::Modes each_mode).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Test::PowShield qw(:pow :util);
use Test::PowShield::Modes;

###############################################################################

my $t;    # the node of the mode under test (each_mode below)

my $conf = http_conf(<<'EOF2');
    %%REDIS%%
    pow_shield_secret "key-space-suite-secret-0123456789abcd";
    pow_shield_difficulty 1;
    pow_shield_strikes 2 1h;

    server {
        %%TEST_SERVER%%

        # an API keyed on a header, and the rest of the site on the address;
        # the same limit, so they would share buckets too
        location /api/ {
            pow_shield_limit 1 1h;
            pow_shield_key $http_x_api_key;
        }

        location /site/ {
            pow_shield_limit 1 1h;
        }
    }
EOF2

my %files = map { ("html/$_/data.json" => '{"ok":true}') } qw(api site);
###############################################################################

sub api { $t->http_get('/api/data.json', 'X-Api-Key' => $_[0]) }

###############################################################################

Test::PowShield::Modes->each_mode($conf, redis => 'timeout=3s', files => \%files, sub {
    my ($m) = @_;
    $t = $m->node(1);

    # the attacker's API key is the victim's address (127.0.0.1: every client
    # of this test)

    is(statuses(map { api('127.0.0.1') } 1 .. 4), '200 429 429 403',
        'the API key "127.0.0.1" opens its breaker');
    is($t->http_get('/site/data.json')->status, 200,
        'the address 127.0.0.1 is not blocked by it');
    is($t->http_get('/site/data.json')->status, 429,
        '... nor did the API key use up its count: its own second request is the first over the limit');
});

###############################################################################

Test::PowShield::Modes->done_testing;
