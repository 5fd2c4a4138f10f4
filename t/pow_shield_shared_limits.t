#!/usr/bin/perl

# A network or the site over its limit is priced, never the reason a client
# under its own limit is blocked (issue 36 item 3; docs/directives.md,
# pow_shield_limit key=; SPEC §5 as the README's deviations amend it): a
# refusal by a limit whose key is not the client's own (key=$pow_shield_net,
# key=site) is no offence of that client's.
#
# - Another client of the /24 (or anyone, for key=site) takes every slot
#   each window; the victim asks once per window, waiting out each
#   Retry-After, and never pays: 429 every time, no strike, never 403
#   (with 3 strikes it was blocked at its 4th refusal).
# - The "Scrapers on many addresses" recipe of docs/operations.md, as
#   written: a scraper rotating through 1,000 addresses pushes its /24s and
#   the site over their limits; a plain client of one of those /24s, far
#   under its own limit and never paying, gets 429s and never a 403.
# - Its own limit still strikes: a client over it is blocked as ever.
#
# Both modes (two nodes in cluster mode: the limits live in one Redis).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Test::PowShield qw(:util);
use Test::PowShield::Modes;

###############################################################################

my $REPO = $Test::PowShield::REPO;
open my $fh, '<', "$REPO/docs/operations.md" or die "docs/operations.md: $!";
my $ops = do { local $/; <$fh> };
my ($recipe) = $ops =~ /```nginx\n(# Scrapers on many addresses:.*?)```/s
    or die "the recipe of docs/operations.md, \"Scrapers on many addresses\", not found\n";
(my $recipe_location = $recipe) =~ s/^location \/ \{/location \/recipe\/ {/m
    or die "the recipe's location / not found\n";

my $conf = http_conf(<<"EOF", workers => 2);
    pow_shield_secret "shared-limits-suite-secret-0123456789ab";
    %%REDIS%%

    set_real_ip_from 127.0.0.1;
    real_ip_header X-Real-IP;

    server {
        %%TEST_SERVER%%

        add_header X-Strikes \$pow_shield_strikes always;

        location /net/ {
            pow_shield_limit 100 1m;
            pow_shield_limit 2 1s name=net key=\$pow_shield_net;
            pow_shield_strikes 3 1m;
        }

        location /site/ {
            pow_shield_limit 100 1m;
            pow_shield_limit 2 1s name=site key=site;
            pow_shield_strikes 3 1m;
        }

        location /own/ {
            pow_shield_limit 1 1m;
            pow_shield_limit 100 1m name=net key=\$pow_shield_net;
            pow_shield_strikes 3 1m;
        }

$recipe_location
    }
EOF

my %files = map { ("html/$_/data.json" => "{}\n") } qw(net site own recipe);

sub get {
    my ($t, $uri, $ip) = @_;
    return $t->http_get($uri, 'X-Real-IP' => $ip);
}

my $n = 0;
Test::PowShield::Modes->each_mode($conf, nodes => 2, redis => 'timeout=3s',
    files => \%files, sub {
    my ($m) = @_;
    $n++;

    for my $where (qw(net site)) {
        my $uri = "/$where/data.json";
        # fresh /24s per mode and location: cluster mode's limits are in Redis
        my $net = "10.$n." . ($where eq 'net' ? 1 : 2);
        my @victim;
        for my $cycle (1 .. 6) {
            # the neighbour takes both slots of the window
            get($m->node(1), $uri, "$net.9") for 1 .. 2;
            my $r = get($m->node(2), $uri, "$net.2");
            push @victim, $r->status // 'none';
            my $wait = $r->header('Retry-After') // 1;
            $wait = 1 if $wait !~ /^\d+$/ || $wait > 2;
            select(undef, undef, undef, $wait + 0.05);
        }
        is(scalar(grep { $_ == 429 } @victim), 6,
            "$m: key=$where: the victim is refused by the shared limit each window")
            or diag "@victim";
        is(scalar(grep { $_ == 403 } @victim), 0,
            "$m: key=$where: waiting out six refusals by the shared limit, never blocked")
            or diag "@victim";
        is(get($m->node(1), $uri, "$net.2")->header('X-Strikes') // '0', '0',
            "$m: key=$where: and never struck");
    }

    # The recipe: a scraper on 1,000 addresses of four /24s, 2 requests
    # each; a plain client of the first /24 every 50 requests.
    my (@plain, %scraper);
    my $i = 0;
    for my $addr (1 .. 1000) {
        my $ip = "10.$n.1" . ($addr % 4) . '.' . (1 + int($addr / 4) % 250);
        for (1 .. 2) {
            $scraper{get($m->node(++$i), '/recipe/data.json', $ip)->status // 'none'}++;
            push @plain, get($m->node($i), '/recipe/data.json', "10.$n.10.250")->status // 'none'
                if $i % 50 == 0;
        }
    }
    ok($scraper{429}, "$m: the recipe challenges the rotating scraper")
        or diag explain \%scraper;
    ok(scalar(grep { $_ == 429 } @plain),
        "$m: the recipe: its plain neighbour is priced with its /24")
        or diag "@plain";
    is(scalar(grep { $_ == 403 } @plain), 0,
        "$m: the recipe: the plain client under its own limit is never blocked")
        or diag "@plain";

    # Its own limit still strikes.
    my @own = map { get($m->node(1), '/own/data.json', "10.$n.3.1")->status // 'none' } 1 .. 6;
    is("@own", '200 429 429 429 403 403',
        "$m: refusals by the client's own limit strike: blocked after 3");
});

###############################################################################

Test::PowShield::Modes->done_testing;
