#!/usr/bin/perl

# Slips an operator makes writing issue 38's recipes (limits per network,
# per AS, site-wide, a Redis Cluster with slot=net) from the docs alone,
# and what "nginx -t" says of each (docs/directives.md, pow_shield_limit
# key= and pow_shield_redis; docs/operations.md, "Troubleshooting from the
# error log"): the directive, the value, file and line, and what to write
# instead, never advice that the next "nginx -t" refuses.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Test::PowShield qw(http_conf);
use Test::PowShield::ConfigCases;

###############################################################################

my $t = Test::PowShield->new;

my $template = http_conf(<<'EOF');
    map $pow_shield_net $scraper_net {
        192.0.2.0/24   "";
        default        $pow_shield_net;
    }
HTTP
    server {
        %%TEST_SERVER%%
SERVER
        location / {
LOCATION
        }
    }
EOF

my $cases = Test::PowShield::ConfigCases->new($t, $template);

###############################################################################

# key="" and key='' are two-character constants (nginx keeps quotes inside
# a word): one key for every request, a site-wide limit nobody meant

for my $quotes ('""', "''") {
    $cases->bad(location => "pow_shield_limit 10 1m name=tenant key=$quotes;", "key=$quotes",
        "key=$quotes", -says => qr/nginx keeps quotes inside a word: .*a map variable whose value is empty/);
}
$cases->good(location => 'pow_shield_limit 10 1m name=tenant key=$scraper_net;',
    'key= of a map variable (an empty value leaves a request out)');

# pow_shield_limit with more words than it takes names its form

$cases->bad(location => 'pow_shield_limit 10 1m approx name=a key=site extra;', 'extra',
    'a limit with a sixth word', -says => qr/expected "<requests> <window> \[approx\]/);
$cases->bad(location => 'pow_shield_limit 10 1m approx name=a key=site approx;', 'approx',
    'a limit with an option twice among six words', -says => qr/each option at most once/);

# a space next to a comma of the seed list splits it into two words

my $seeds = 'redis://127.0.0.1:17301,redis://127.0.0.1:17302';
$cases->bad(http => 'pow_shield_redis redis://127.0.0.1:17301, redis://127.0.0.1:17302 cluster;',
    'redis://127.0.0.1:17301,', 'a space after a comma of the seed list',
    -says => qr/a space next to a comma splits the seed list: write it without spaces/);
$cases->bad(http => 'pow_shield_redis redis://:pw@127.0.0.1:17301, redis://:pw@127.0.0.1:17302 cluster;',
    'redis://***@127.0.0.1:17301,', 'a space after a comma, with a password (hidden)',
    -hide => 'pw@', -says => qr/a space next to a comma/);
$cases->bad(http => 'pow_shield_redis redis://127.0.0.1:17301 ,redis://127.0.0.1:17302 cluster;',
    ',redis://127.0.0.1:17302', 'a space before a comma of the seed list',
    -says => qr/a space next to a comma splits the seed list/);
$cases->bad(http => 'pow_shield_redis sentinel://127.0.0.1:26379, 127.0.0.1:26380/m;',
    'sentinel://127.0.0.1:26379,', 'a space after a comma of the sentinels',
    -says => qr/a space next to a comma/);
$cases->bad(http => 'pow_shield_redis redis://127.0.0.1:17301, cluster;',
    'redis://127.0.0.1:17301,', 'a comma at the end of the seed list',
    -says => qr/the seed list ends with a comma/);
$cases->good(http => "pow_shield_redis $seeds cluster;", 'the seed list without spaces',
    LOCATION => "pow_shield_limit 10 1m;\n");

# slot= on one Redis: "add cluster" only where cluster is taken

for my $url ('sentinel://127.0.0.1:26379/mymaster', 'unix:/tmp/redis.sock') {
    my ($scheme) = $url =~ /^(\w+)/;
    $cases->bad(http => "pow_shield_redis $url slot=net;", 'slot=net', "slot=net with $scheme",
        -says => qr/slot= is for a Redis Cluster only: .*remove slot=/);
    my ($file) = $cases->config(http => "pow_shield_redis $url slot=net;");
    my (undef, $out) = $t->test_config($file);
    unlike($out, qr/add "cluster"/, "slot=net with $scheme: no advice to add cluster");
}
$cases->bad(http => 'pow_shield_redis redis://127.0.0.1:17301 slot=net;', 'slot=net',
    'slot=net on one Redis by address', -says => qr/add "cluster"/);

# slot=net where no limit can count per network: warned of, at the
# directive; quiet where a limit counts key=$pow_shield_net, itself or
# through a map, anywhere in the http block

my $slot_net = "pow_shield_redis $seeds cluster slot=net;";
my $for_nothing = qr/\[warn\] pow_shield: "slot=net" spreads clients over the masters by network for nothing/;
$cases->warns(http => $slot_net, $for_nothing, 'slot=net, a limit per client only',
    LOCATION => "pow_shield_limit 10 1m;\n");
$cases->warns(http => $slot_net, $for_nothing, 'slot=net, a site-wide limit (a constant key)',
    LOCATION => "pow_shield_limit 10 1m;\npow_shield_limit 100 1m name=site key=site;\n");
$cases->warns(http => $slot_net, $for_nothing, 'slot=net, nothing shielded');
$cases->quiet(http => $slot_net, 'slot=net with a limit per network',
    LOCATION => "pow_shield_limit 10 1m;\npow_shield_limit 100 1m name=net key=\$pow_shield_net;\n");
$cases->quiet(http => $slot_net, 'slot=net with a limit per network through a map',
    LOCATION => "pow_shield_limit 10 1m;\npow_shield_limit 100 1m name=net key=\$scraper_net;\n");
$cases->quiet(http => $slot_net, 'slot=net with a limit per network in another location',
    SERVER => "location /b/ { pow_shield_limit 100 1m name=net key=\${pow_shield_net}; }\n");
$cases->quiet(http => "pow_shield_redis $seeds cluster;", 'slot=client without a limit per network',
    LOCATION => "pow_shield_limit 10 1m;\n");

###############################################################################

done_testing();
