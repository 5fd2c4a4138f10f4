#!/usr/bin/perl

# pow_shield_dry_run (docs/directives.md): decide, count, log and set variables,
# but never reject.  In local mode and in cluster mode (where Redis decides
# and counts).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Test::PowShield qw(:pow :redis http_conf);
use Test::PowShield::Modes;

###############################################################################

my $conf = http_conf(<<'EOF');
    %%REDIS%%

    server {
        %%TEST_SERVER%%

        add_header X-Result $pow_shield_result always;

        pow_shield_key $http_x_client;
        pow_shield_difficulty 1;
        pow_shield_dry_run on;

        location /dry/ {
            pow_shield_limit 2 1h;
            pow_shield_dry_run DRY;
        }

        location /enforced/ {
            pow_shield_limit 2 1h;
            pow_shield_dry_run off;
        }
    }
EOF

(my $dry = $conf) =~ s/DRY/on/;
(my $enforce = $conf) =~ s/DRY/off/;

###############################################################################

sub get {
    my ($t, $client, $uri, %h) = @_;
    return $t->http_get($uri, 'X-Client' => $client, %h);
}

Test::PowShield::Modes->each_mode($dry, files => {
    'html/dry/data.json' => qq({"ok":true}\n),
    'html/enforced/data.json' => qq({"ok":true}\n),
}, sub {
    my ($m) = @_;
    my $t = $m->node(1);

    # dry run never rejects: everything over the limit passes, still counted

    my (@remaining, @results);
    for my $i (1 .. 5) {
        my $r = get($t, 'dry', '/dry/data.json');
        is($r->status, 200, "$m: dry run, request $i of limit 2: 200");
        push @remaining, $r->header('X-RateLimit-Remaining') // 'none';
        push @results, $r->header('X-Result') // 'none';
        if ($i == 5) {
            is($r->body, qq({"ok":true}\n), "$m: dry run over the limit: content served");
            is($r->header('X-RateLimit-Limit'), 2,
                "$m: dry run: rate-limit headers are set");
            ok($r->has_header('RateLimit'), "$m: dry run: RateLimit header");
            is($r->header('X-Result'), 'challenge',
                "$m: dry run over the limit: \$pow_shield_result is the decision");
        }
    }
    is("@remaining", '1 0 0 0 0', "$m: dry run: requests are counted");
    is("@results", 'pass pass challenge challenge challenge',
        "$m: dry run: \$pow_shield_result is each request's decision");
    is($m->redis->cmd('ZCARD', client_key("\0dry\0dry", 'w', 2, 3600000)), 2,
        "$m: dry run: counted in Redis, the requests within the limit")
        if $m->cluster;

    # under the limit the result is pass

    is(get($t, 'dry-green', '/dry/data.json')->header('X-Result'), 'pass',
        "$m: dry run under the limit: result pass");

    # a wrong solution is not rejected either

    my $r = get($t, 'dry', '/dry/data.json', 'X-PoW-Challenge' => 'a.b',
        'X-PoW-Nonce' => '1');
    is($r->status, 200, "$m: dry run, malformed solution over the limit: 200");

    # the would-be rejection is logged with "dry run" and the client address

    ok(scalar $t->error_log_lines(qr{dry run.*127\.0\.0\.1.*/dry/data\.json}),
        "$m: dry run: decision logged with \"dry run\" and the client address");
    ok(scalar $t->error_log_lines(qr{\[warn\].*dry run}),
        "$m: dry run: logged at the default level warn");

    # "pow_shield_dry_run off" in a location overrides the server's "on"

    get($t, 'enforced', '/enforced/data.json') for 1 .. 2;
    $r = get($t, 'enforced', '/enforced/data.json');
    is($r->status, 429, "$m: dry run off in the location: 429 over the limit");
    ok($r->has_header('X-PoW-Challenge'), "$m: dry run off: challenge issued");

    # a dry run counts under a key of its own: switching it off with a
    # reload starts the client afresh (a dry run enforces nothing, anywhere)

    $t->write_file_expand('nginx.conf', $m->conf($enforce));
    ok($t->reload, "$m: reload with dry run off");
    $r = get($t, 'dry', '/dry/data.json');
    is($r->status, 200, "$m: counted in dry run, not enforced after the reload: 200");
});

###############################################################################

Test::PowShield::Modes->done_testing;
