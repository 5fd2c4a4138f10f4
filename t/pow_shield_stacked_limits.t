#!/usr/bin/perl

# Several limits per location, named, as limit_req stacks
# (docs/directives.md, pow_shield_limit): a request is counted against
# every limit or none; the first exhausted limit decides (429 with its
# Retry-After); X-RateLimit-* and RateLimit show the tightest limit,
# RateLimit-Policy every one; pow_shield_requests_total counts by limit
# name.  In local mode (the zone's buckets) and in cluster mode (one
# Redis round trip for all limits).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Test::PowShield qw(:pow :util :redis http_conf);
use Test::PowShield::Metrics qw(scrape metric);
use Test::PowShield::Modes;

###############################################################################

# The example of docs/directives.md, as written there.
my $doc = do {
    open my $fh, '<', "$Test::PowShield::REPO/docs/directives.md" or die $!;
    local $/;
    <$fh>;
};
my ($example) = $doc =~ /```nginx\n(location \/api\/ \{\n(?:(?!```).)*?name=burst(?:(?!```).)*?)```/s
    or die 'the stacked limits example is missing from docs/directives.md';
(my $docs_location = $example) =~ s{location /api/}{location /docs/};
# ... and its example of approx beside exact, as written there.
my ($mixed_example) = $doc =~ /```nginx\n(location \/search\/ \{\n(?:(?!```).)*?approx(?:(?!```).)*?)```/s
    or die 'the approx beside exact example is missing from docs/directives.md';

my $conf = http_conf(<<"EOF");
    %%REDIS%%
    pow_shield_secret "stacked-limits-suite-secret-0123456789";
    pow_shield_difficulty 1;
    pow_shield_key \$http_x_client;
    pow_shield_strikes off;

    server {
        %%TEST_SERVER%%

        # the minute's limit runs out first
        location /api/ {
            pow_shield_limit 3 1m name=burst;
            pow_shield_limit 5 1h name=hourly;
        }

        # the hour's limit runs out first; the other is unnamed
        location /two/ {
            pow_shield_limit 5 1m;
            pow_shield_limit 2 1h name=hour;
        }

        # counted by every limit or by none
        location /none/ {
            pow_shield_limit 2 1h name=small;
            pow_shield_limit 3 1d name=big;
        }

        # approx (cluster mode's counters; local mode's buckets)
        location /approx/ {
            pow_shield_limit 3 1m approx name=fast;
            pow_shield_limit 5 1h approx name=slow;
        }

        # each line counts its own way: approx (a counter) beside exact (a log)
        location /mixed/ {
            pow_shield_limit 3 1m approx name=quick;
            pow_shield_limit 2 1h name=long;
        }

        # one unnamed limit: as before limits stacked
        location /plain/ {
            pow_shield_limit 3 1m;
        }

$docs_location
$mixed_example
        location = /status {
            pow_shield_status;
        }
    }
EOF

Test::PowShield::Modes->each_mode($conf,
    files => { map { ("html/$_/data.json" => '{"ok":true}') } qw(api two none approx mixed plain docs search) }, sub {
    my ($m) = @_;
    my $t = $m->node(1);
    my $get = sub {
        my ($client, $where) = @_;
        return $t->http_get("/$where/data.json", 'X-Client' => "$m-$client");
    };

    # the tightest limit in the headers, every policy listed

    my @r = map { $get->('a', 'api') } 1 .. 4;
    is(statuses(@r), '200 200 200 429', "$m: 3 per minute and 5 per hour: the 4th is refused");
    is($r[0]->header('RateLimit-Policy'), '"burst";q=3;w=60, "hourly";q=5;w=3600',
        "$m: RateLimit-Policy lists every limit by name, in order");
    is($r[0]->header('X-RateLimit-Limit'), 3, "$m: X-RateLimit-Limit: the tightest limit's");
    is($r[0]->header('X-RateLimit-Remaining'), 2, "$m: X-RateLimit-Remaining: the tightest's");
    like($r[0]->header('RateLimit') // '', qr/^"burst";r=2;t=\d+$/,
        "$m: RateLimit names the tightest limit");
    is($r[3]->header('X-RateLimit-Limit'), 3, "$m: refused: the refusing limit's headers");
    my $retry = $r[3]->header('Retry-After') // 0;
    ok($retry >= 1 && $retry <= 60, "$m: Retry-After is the minute limit's ($retry s)");

    # the hour runs out first: it decides, with its Retry-After

    @r = map { $get->('b', 'two') } 1 .. 3;
    is(statuses(@r), '200 200 429', "$m: 2 per hour and 5 per minute: the 3rd is refused");
    is($r[0]->header('RateLimit-Policy'), '"5r/m";q=5;w=60, "hour";q=2;w=3600',
        "$m: an unnamed limit beside a named one is named by its numbers");
    is($r[0]->header('X-RateLimit-Limit'), 2, "$m: the tighter (hour) limit in the headers");
    like($r[2]->header('RateLimit') // '', qr/^"hour";r=0;/, "$m: refused by \"hour\"");
    $retry = $r[2]->header('Retry-After') // 0;
    ok($retry > 60 && $retry <= 3600, "$m: Retry-After is the hour limit's ($retry s)");

    # a refused request counts against no limit

    @r = map { $get->('c', 'none') } 1 .. 4;
    is(statuses(@r), '200 200 429 429', "$m: refused by the smaller limit");
    if ($m->cluster) {
        is($m->redis->cmd('ZCARD', client_key("$m-c", 'w', 3, 86400000)), 2,
            "$m: the other limit counted only the admitted requests");
        is($m->redis->cmd('ZCARD', client_key("$m-c", 'w', 2, 3600000)), 2,
            "$m: ... as the refusing one");
    }

    # approx: the same decisions, each limit in its counter

    @r = map { $get->('f', 'approx') } 1 .. 4;
    is(statuses(@r), '200 200 200 429', "$m: approx: the 4th is refused by the minute limit");
    like($r[3]->header('RateLimit') // '', qr/^"fast";r=0;/, "$m: approx: refused by \"fast\"");
    is($m->redis->cmd('HGET', client_key("$m-f", 'a', 5, 3600000), 'c'), 3,
        "$m: approx: the hour's counter holds the 3 admitted requests")
        if $m->cluster;

    # approx on one line, exact on the other: each counted its own way

    @r = map { $get->('g', 'mixed') } 1 .. 3;
    is(statuses(@r), '200 200 429', "$m: approx beside exact: the 3rd is refused by the exact hour");
    like($r[2]->header('RateLimit') // '', qr/^"long";r=0;/, "$m: approx beside exact: refused by \"long\"");
    if ($m->cluster) {
        my $redis = $m->redis;
        is($redis->cmd('HGET', client_key("$m-g", 'a', 3, 60000), 'c'), 2,
            "$m: approx beside exact: the approx minute in its counter (2 admitted)");
        is($redis->cmd('ZCARD', client_key("$m-g", 'w', 2, 3600000)), 2,
            "$m: approx beside exact: the exact hour in its log (2 admitted)");
        is($redis->cmd('EXISTS', client_key("$m-g", 'w', 3, 60000)), 0,
            "$m: approx beside exact: no log for the approx minute");
        is($redis->cmd('EXISTS', client_key("$m-g", 'a', 2, 3600000)), 0,
            "$m: approx beside exact: no counter for the exact hour");
    }

    # the documentation's approx beside exact, as written
    my $search = $get->('h', 'search');
    is($search->status, 200, "$m: docs' approx beside exact: passes");
    is($search->header('RateLimit-Policy'), '"100r/m";q=100;w=60, "1000r/h";q=1000;w=3600',
        "$m: docs' approx beside exact: both limits listed");
    if ($m->cluster) {
        is($m->redis->cmd('TYPE', client_key("$m-h", 'a', 100, 60000)), 'hash',
            "$m: docs' approx beside exact: the minute in a counter");
        is($m->redis->cmd('TYPE', client_key("$m-h", 'w', 1000, 3600000)), 'zset',
            "$m: docs' approx beside exact: the hour in a log");
    }

    # one unnamed limit: the headers as before

    my $plain = $get->('d', 'plain');
    is($plain->header('RateLimit-Policy'), '"pow-shield";q=3;w=60',
        "$m: one unnamed limit: RateLimit-Policy \"pow-shield\"");
    like($plain->header('RateLimit') // '', qr/^"pow-shield";r=2;t=\d+$/,
        "$m: one unnamed limit: RateLimit \"pow-shield\"");

    # the documentation's example

    my $d = $get->('e', 'docs');
    is($d->status, 200, "$m: docs example: passes");
    is($d->header('RateLimit-Policy'), '"burst";q=10;w=1, "hourly";q=1000;w=3600',
        "$m: docs example: the RateLimit-Policy the documentation shows");

    # the metrics count by limit name; the plain location as before

    my $s = scrape($t, '/status');
    is(metric($s, 'pow_shield_requests_total', result => 'pass', limit => 'burst'), 3 + 1,
        "$m: requests_total{result=pass,limit=burst}: the tightest limit of the passes (/api/ and the docs' /api/)");
    is(metric($s, 'pow_shield_requests_total', result => 'challenge', limit => 'burst'), 1,
        "$m: requests_total{result=challenge,limit=burst}");
    is(metric($s, 'pow_shield_requests_total', result => 'challenge', limit => 'hour'), 1,
        "$m: requests_total{result=challenge,limit=hour}");
    is(metric($s, 'pow_shield_requests_total', result => 'challenge', limit => 'small'), 2,
        "$m: requests_total{result=challenge,limit=small}");
    is(metric($s, 'pow_shield_requests_total', result => 'pass', limit => 'hourly'), 0,
        "$m: a limit that was never the tightest: 0, listed");
    is(metric($s, 'pow_shield_requests_total', result => 'pass'), 1,
        "$m: the plain location's pass is counted without a limit label");
});

###############################################################################

Test::PowShield::Modes->done_testing;
