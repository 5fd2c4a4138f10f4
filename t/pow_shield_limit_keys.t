#!/usr/bin/perl

# A limit counted per another identity than the client (docs/directives.md,
# pow_shield_limit ... key=): a scraper rotating through many addresses of
# a few /24s stays under the per-address limit but is challenged at the
# /24 limit (key=$pow_shield_net); a client of another /24 passes; an empty
# key= value, or one that is a variable's name as text (a geo default),
# leaves a request out of that limit only.  The address is set
# with X-Real-IP (realip), as $pow_shield_net reads it after realip.  In
# local mode (the zone's buckets) and in cluster mode (one Redis: every
# limit of a request in one script call).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Time::HiRes ();
use Test::PowShield qw(:pow :util :redis http_conf);
use Test::PowShield::Modes;

###############################################################################

# The recipe of docs/operations.md, "Scrapers on many addresses", as
# written there.
my $ops = do {
    open my $fh, '<', "$Test::PowShield::REPO/docs/operations.md" or die $!;
    local $/;
    <$fh>;
};
my ($recipe) = $ops =~ /```nginx\n# Scrapers on many addresses[^\n]*\n(location \/ \{\n.*?\n\})\n```/s
    or die 'the recipe "Scrapers on many addresses" is missing from docs/operations.md';
$recipe =~ s{^location / }{location /recipe/ } or die;
my %numbers = map { $_ => 1 } $recipe =~ /pow_shield_limit (\d+ 1m)/g;
die "the recipe's limits are no longer 60, 300 and 1000 a minute: update this suite\n"
    unless join(',', sort keys %numbers) eq '1000 1m,300 1m,60 1m';

my $conf = http_conf(<<"EOF");
    %%REDIS%%
    pow_shield_secret "limit-keys-suite-secret-0123456789ab";
    pow_shield_difficulty 1;
    pow_shield_strikes off;

    set_real_ip_from 127.0.0.1;
    real_ip_header X-Real-IP;

    # a slip: geo takes its values literally, so its default is the text
    # "\$pow_shield_net" for every address it does not list
    geo \$as_slip {
        10.60.1.0/24   AS64496;
        default        \$pow_shield_net;
    }

    server {
        %%TEST_SERVER%%

        # 5 an hour per address, 10 an hour per /24
        location /net/ {
            pow_shield_limit 5 1h;
            pow_shield_limit 10 1h name=net key=\$pow_shield_net;
        }

        # /net/'s limits in dry run: counted apart from /net/'s
        location /dry/ {
            pow_shield_dry_run on;
            pow_shield_limit 5 1h;
            pow_shield_limit 10 1h name=net key=\$pow_shield_net;
        }

        # 3 an hour per address, 1 an hour per tenant (when there is one)
        location /tenant/ {
            pow_shield_limit 3 1h;
            pow_shield_limit 1 1h name=tenant key=\$http_x_tenant;
        }

        # a client key from a header, under the tenant limit's numbers: it
        # must never share a tenant's own counts
        location /forge/ {
            pow_shield_key \$http_x_client;
            pow_shield_limit 1 1h;
        }

        # two limits of one key= text: each counts the tenant (the value
        # made once, for both)
        location /shared/ {
            pow_shield_limit 5 1h name=a key=\$http_x_tenant;
            pow_shield_limit 2 1h name=b key=\$http_x_tenant;
        }

        # only a keyed limit: a request without a tenant is counted by none
        location /only/ {
            pow_shield_limit 1 1h name=tenant key=\$http_x_tenant;
        }

        # 100 an hour per address, 2 an hour per AS (the geo above)
        location /as/ {
            pow_shield_limit 100 1h;
            pow_shield_limit 2 1h name=as key=\$as_slip;
        }

        location = /net {
            return 200 "\$pow_shield_net";
        }

$recipe
    }
EOF

Test::PowShield::Modes->each_mode($conf,
    files => { map { ("html/$_/data.json" => '{"ok":true}') } qw(net dry tenant only recipe forge shared as) }, sub {
    my ($m) = @_;
    my $t = $m->node(1);
    my $from = sub {
        my ($ip, $where, @headers) = @_;
        return $t->http_get("/$where/data.json", 'X-Real-IP' => $ip, @headers);
    };

    # the variable: the client's /24 or /48, after realip

    is($t->http_get('/net', 'X-Real-IP' => '198.51.100.77')->body, '198.51.100.0/24',
        '$pow_shield_net: an IPv4 client\'s /24');
    is($t->http_get('/net', 'X-Real-IP' => '2001:db8:7:8::1')->body, '2001:db8:7::/48',
        '$pow_shield_net: an IPv6 client\'s /48');

    # a scraper over 30 addresses of two /24s, 2 requests each: every
    # address is under its 5, each /24 admits its 10

    my (%status, %refused_by);
    for my $net ('10.1.1', '10.1.2') {
        for my $host (1 .. 15) {
            for (1 .. 2) {
                my $r = $from->("$net.$host", 'net');
                $status{$r->status}++;
                $refused_by{$1}++ if ($r->header('RateLimit') // '') =~ /^"([^"]+)";r=0/
                    && $r->status == 429;
            }
        }
    }
    is($status{200}, 20, 'the scraper: 10 requests pass per /24');
    is($status{429}, 40, 'the scraper: its other 40 requests are challenged');
    is($refused_by{net}, 40, 'the scraper: challenged by the /24 limit ("net")');

    # a dry-run location's counts of a /24 are its own: 12 requests of
    # 10.50.1.0/24 there (all let through) leave /net/'s 10 untouched

    my @dry = map { $from->("10.50.1.$_", 'dry') } 1 .. 12;
    is(statuses(@dry), join(' ', ('200') x 12), 'dry run: a /24 over its limit is let through');
    my $dry_net = $from->('10.50.1.13', 'net');
    is($dry_net->status, 200, 'dry run: ... and the same /24 is not over the enforcing location\'s limit');

    # the network of an IPv6 client and of an IPv4-mapped one: the /48,
    # and the /24 of the IPv4 address it carries

    is($from->('2001:db8:7:8::1', 'net')->status, 200, 'an IPv6 client: counted by its /48');
    is($from->('::ffff:10.7.7.7', 'net')->status, 200, 'an IPv4-mapped client: counted by its /24');
    is($from->('10.7.7.8', 'net')->status, 200, '... and its IPv4 neighbour');

    # a client of another /24 passes, and is counted per address as ever

    my @r = map { $from->('10.9.9.9', 'net') } 1 .. 6;
    is(statuses(@r), '200 200 200 200 200 429',
        'a client of another /24 passes, up to its own 5');
    like($r[5]->header('RateLimit') // '', qr/^"5r\/h";r=0/,
        '... and is refused by its own limit, not the network\'s');
    is($r[0]->header('RateLimit-Policy'), '"5r/h";q=5;w=3600, "net";q=10;w=3600',
        'RateLimit-Policy lists both limits');

    # the challenge of a /24 refusal is paid as any: one solution admits
    # one request

    my $refused = $from->('10.1.1.200', 'net');
    is($refused->status, 429, 'a new address of a full /24 is challenged');
    my $paid = $t->http_get('/net/data.json', 'X-Real-IP' => '10.1.1.200', solution($refused));
    is($paid->status, 200, 'its solution admits it');

    # an empty key= value leaves the request out of that limit only

    @r = map { $from->("10.5.0.$_", 'tenant', 'X-Tenant' => "$m-acme") } 1 .. 2;
    is(statuses(@r), '200 429', 'one tenant: 1 an hour across its addresses');
    @r = map { $from->('10.5.1.1', 'tenant') } 1 .. 4;
    is(statuses(@r), '200 200 200 429',
        'no tenant: out of the tenant limit, still counted per address');
    @r = map { $from->('10.5.2.1', 'only') } 1 .. 4;
    is(statuses(@r), '200 200 200 200', 'no tenant where only the tenant limit is: never counted');
    @r = map { $from->("10.5.3.$_", 'only', 'X-Tenant' => "$m-b") } 1 .. 2;
    is(statuses(@r), '200 429', '... a tenant there is');

    # a key= value that is a variable's name as text (the geo's default)
    # is left out of that limit, as an empty value: never one key shared
    # by every address the geo does not list; one warning per worker and
    # limit, not per request

    @r = map { $from->("10.61.$_.1", 'as') } 1 .. 4;
    is(statuses(@r), '200 200 200 200',
        'a geo default that names a variable: unknown addresses are not counted together');
    @r = map { $from->("10.60.1.$_", 'as') } 1 .. 3;
    is(statuses(@r), '200 200 429', '... an address the geo lists is counted by its AS');
    my $literal = qr/\[warn\] .*pow_shield: limit "as" got the key value "\$pow_shield_net", a variable's name as text/;
    is($t->error_log_count($literal), 1, '... and the worker warns of the value once');

    # two limits of one key= text both count per its value, not per client

    @r = map { $from->("10.5.5.$_", 'shared', 'X-Tenant' => "$m-shared") } 1 .. 3;
    is(statuses(@r), '200 200 429', 'one key= text in two limits: both count the tenant');
    like($r[2]->header('RateLimit') // '', qr/^"b";r=0/, '... the tighter refuses');

    # a header can carry any byte but NUL: a client key that spells a key=
    # value's own counts (as they were once named, "\x01key=") is still a
    # client's, and a tenant of that name keeps its own limit

    is($t->http_get('/forge/data.json', 'X-Client' => "\x01key=$m-forged")->status, 200,
        'a forged client key passes as its own client');
    is($from->('10.5.4.1', 'tenant', 'X-Tenant' => "$m-forged")->status, 200,
        '... and the tenant it names is not refused by it');

    # the recipe: 300 a minute per /24 from addresses each under its 60,
    # then everyone together over 1000 a minute pays

    # (cluster mode: the site's approx counter counts per fixed minute of
    # Redis's clock; past a minute's end it weighs the last minute's
    # share, and the site admits more than the exact log would. The
    # recipe's 1,000 requests, a few seconds, start with 30 s of a minute
    # left at least; on a machine so loaded that they still cross one, the
    # counts that depend on it are skipped)
    my $minute = sub {
        my ($s, $us) = @{$m->redis->cmd('TIME')};
        return (int($s / 60), 60 - $s % 60 - $us / 1e6);
    };
    my $started;
    if ($m->cluster) {
        my $left;
        ($started, $left) = $minute->();
        if ($left < 30) {
            Time::HiRes::sleep($left + 0.05);
            ($started) = $minute->();
        }
    }

    my @got = map { my $h = $_; map { $from->("10.20.1.$h", 'recipe')->status } 1 .. 30 } 1 .. 10;
    is(scalar(grep { $_ == 200 } @got), 300, 'recipe: 10 addresses of one /24, 30 each: all pass');
    my $r = $from->('10.20.1.11', 'recipe');
    is($r->status, 429, 'recipe: the /24\'s 301st request is challenged, from a new address');
    like($r->header('RateLimit') // '', qr/^"net";r=0/, 'recipe: ... by the /24 limit');
    is($from->('10.20.2.1', 'recipe')->status, 200, 'recipe: a client of another /24 passes');
    my ($sent, $passed) = (0, 0);
    ADDRESS: for my $net (1 .. 10) {
        for my $host (1 .. 15) {
            for (1 .. 20) {
                last ADDRESS if $sent == 1000 - 301;
                $sent++;
                $passed++ if $from->("10.30.$net.$host", 'recipe')->status == 200;
            }
        }
    }
    $r = $from->('10.40.1.1', 'recipe');
    my $crossed = $m->cluster && ($minute->())[0] != $started;
    SKIP: {
        skip 'the recipe\'s requests crossed a minute of Redis\'s clock (a loaded machine)', 3
            if $crossed;
        is($passed, 699, 'recipe: every /24 and address under its limit: up to 1000 a minute pass');
        is($r->status, 429, 'recipe: over 1000 a minute site-wide, a new client pays');
        like($r->header('RateLimit') // '', qr/^"site";r=0/, 'recipe: ... the site-wide limit');
    }

    if ($m->cluster) {
        my @net = grep { /:w:10:3600000$/ } @{$m->redis->cmd('KEYS', '*') || []};
        # 10.1.1, 10.1.2, 10.9.9, 10.50.1, 10.7.7, 2001:db8:7::/48, and
        # 10.50.1 of the dry run's, under its own name
        is(scalar @net, 7, 'cluster: one log per /24 (and /48) of the keyed limit, the dry run\'s apart');
        is($m->redis->cmd('ZCARD', client_key("\0key=10.1.2.0/24", 'w', 10, 3600000)), 10,
            'cluster: the /24\'s log, under a tag of its own, holds its 10 admitted requests');
        is($m->redis->cmd('ZCARD', client_key("\0key=2001:db8:7::/48", 'w', 10, 3600000)), 1,
            'cluster: the IPv6 client\'s /48 has a log of its own');
        is($m->redis->cmd('ZCARD', client_key("\0key=10.7.7.0/24", 'w', 10, 3600000)), 2,
            'cluster: the IPv4-mapped client counted in its IPv4 /24\'s log');
        # the recipe's site-wide limit is approx: one small hash, not a
        # 1,000-member log every admitted request writes
        my $site = client_key("\0key=site", 'a', 1000, 60000);
        is($m->redis->cmd('TYPE', $site), 'hash',
            'cluster: the recipe\'s site-wide limit counts approx, in one small hash');
        SKIP: {
            skip 'the recipe crossed a minute', 1 if $crossed;
            is($m->redis->cmd('HGET', $site, 'c'), 1000, '... of the 1000 it admitted');
        }
        is($m->redis->cmd('EXISTS', client_key("\0key=site", 'w', 1000, 60000)), 0,
            '... and keeps no exact log');
    }
});

###############################################################################

Test::PowShield::Modes->done_testing;
