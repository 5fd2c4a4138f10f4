#!/usr/bin/perl

# A request is counted once, even when index, try_files or error_page re-run
# the access phase; subrequests are never counted (docs/operations.md, "How
# a request is decided").  In local mode, and in cluster mode, where a
# request waiting for Redis is suspended and resumed (docs/directives.md,
# pow_shield_redis): there the one count is also one entry in Redis.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Test::PowShield qw(:redis http_conf);
use Test::PowShield::Modes;

###############################################################################

my $has_ssi = Test::PowShield->has_module('ssi');
my $ssi = $has_ssi ? 'ssi on;' : '';

my $conf = http_conf(<<"EOF");
    %%REDIS%%

    server {
        %%TEST_SERVER%%

        pow_shield_key \$http_x_client;
        pow_shield_difficulty 1;

        location /idx/ {
            pow_shield_limit 3 1h;
            index index.json;
        }

        location /tf/ {
            pow_shield_limit 3 1h;
            try_files \$uri /tf/fallback.json;
        }

        location /ep/ {
            pow_shield_limit 3 1h;
            error_page 404 /ep/notfound.json;
        }

        # error_page into another shielded location with another limit
        location /epa/ {
            pow_shield_limit 3 1h;
            error_page 404 /epb/notfound.json;
        }

        location /epb/ {
            pow_shield_limit 5 1h;
        }

        # try_files from an approx limit into the same limit exact: the zone
        # counts both in one window, so the request is counted once
        location /apx/ {
            pow_shield_limit 5 1h approx;
            try_files \$uri /exact/index.json;
        }

        location /exact/ {
            pow_shield_limit 5 1h;
        }

        # unshielded location redirecting into a shielded one
        location /open/ {
            try_files \$uri /idx/index.json;
        }

        # unshielded page with shielded includes
        location /page/ {
            $ssi
        }

        # shielded page with shielded includes
        location /spage/ {
            pow_shield_limit 1 1h;
            $ssi
        }

        location /inc/ {
            pow_shield_limit 1 1h;
        }
    }
EOF

my $page = join "\n", ('<!--# include virtual="/inc/a.json" -->') x 3;

###############################################################################

sub get {
    my ($t, $client, $uri) = @_;
    return $t->http_get($uri, 'X-Client' => $client);
}

Test::PowShield::Modes->each_mode($conf, files => {
    'html/idx/index.json' => qq({"index":true}\n),
    'html/tf/fallback.json' => qq({"fallback":true}\n),
    'html/ep/notfound.json' => qq({"notfound":true}\n),
    'html/inc/a.json' => qq({"inc":1}),
    'html/epb/notfound.json' => qq({"epb":true}\n),
    'html/exact/index.json' => qq({"exact":true}\n),
    'html/page/p.html' => "$page\n",
    'html/spage/p.html' => "$page\n",
}, sub {
    my ($m) = @_;
    my $t = $m->node(1);

    # cluster mode: the entries of a client's window for pow_shield_limit
    # <n> 1h, one per request counted
    my $entries = sub {
        my ($client, $n) = @_;
        return $m->redis->cmd('ZCARD', client_key($client, 'w', $n // 3, 3600000));
    };

    # index: "/idx/" is redirected internally to "/idx/index.json"

    my $r = get($t, 'index', '/idx/');
    is($r->status, 200, "$m: index: 200");
    is($r->body, qq({"index":true}\n), "$m: index: index file served");
    is($r->header('X-RateLimit-Remaining'), 2, "$m: index: counted once (3 - 1)");
    is($entries->('index'), 1, "$m: index: one entry in Redis") if $m->cluster;
    is(get($t, 'index', '/idx/')->header('X-RateLimit-Remaining'), 1,
        "$m: index: second request counted once");
    is(get($t, 'index', '/idx/')->status, 200, "$m: index: third request passes");
    is(get($t, 'index', '/idx/')->status, 429, "$m: index: fourth request is 429");

    # try_files: a missing file falls back to another URI

    $r = get($t, 'tf', '/tf/missing.json');
    is($r->status, 200, "$m: try_files: 200");
    is($r->body, qq({"fallback":true}\n), "$m: try_files: fallback served");
    is($r->header('X-RateLimit-Remaining'), 2, "$m: try_files: counted once");
    is($entries->('tf'), 1, "$m: try_files: one entry in Redis") if $m->cluster;
    is(get($t, 'tf', '/tf/missing.json')->header('X-RateLimit-Remaining'), 1,
        "$m: try_files: second request counted once");
    is(get($t, 'tf', '/tf/missing.json')->status, 200, "$m: try_files: third passes");
    is(get($t, 'tf', '/tf/missing.json')->status, 429, "$m: try_files: fourth is 429");

    # error_page: the 404 is redirected to an error document

    $r = get($t, 'ep', '/ep/missing.json');
    is($r->status, 404, "$m: error_page: 404 kept");
    is($r->body, qq({"notfound":true}\n), "$m: error_page: error document served");
    is($r->header('X-RateLimit-Remaining'), 2, "$m: error_page: counted once");
    is(scalar(my @v = $r->header_values('X-RateLimit-Remaining')), 1,
        "$m: error_page: headers sent once");
    is($entries->('ep'), 1, "$m: error_page: one entry in Redis") if $m->cluster;
    is(get($t, 'ep', '/ep/missing.json')->header('X-RateLimit-Remaining'), 1,
        "$m: error_page: second request counted once");
    is(get($t, 'ep', '/ep/missing.json')->status, 404, "$m: error_page: third passes");
    is(get($t, 'ep', '/ep/missing.json')->status, 429, "$m: error_page: fourth is 429");

    # error_page into another shielded location: counted once, in the
    # bucket of the location that was asked for

    $r = get($t, 'epab', '/epa/missing.json');
    is($r->status, 404, "$m: error_page into another shielded location: 404");
    is($r->body, qq({"epb":true}\n), "$m: error_page into another location: served");
    is(get($t, 'epab', '/epa/missing.json')->status, 404, "$m: second request: 404");
    is(get($t, 'epab', '/epa/missing.json')->status, 404, "$m: third request: 404");
    is(get($t, 'epab', '/epa/missing.json')->status, 429,
        "$m: fourth request: 429 (limit 3 of the first location, counted once)");
    $r = get($t, 'epab', '/epb/notfound.json');
    is($r->header('X-RateLimit-Remaining'), 4,
        "$m: the error_page target location was not counted (5 - 1)");

    # from an approx limit into the same limit exact: counted once (in
    # local mode one window holds both; with Redis the first counts)

    my @apx = map { get($t, 'apx', '/apx/missing.json')->status } 1 .. 6;
    is("@apx", '200 200 200 200 200 429',
        "$m: approx into the same limit exact: 5 pass, the 6th is 429");

    # an unshielded location redirecting into a shielded one: counted once

    $r = get($t, 'open', '/open/missing.json');
    is($r->status, 200, "$m: unshielded -> shielded redirect: 200");
    is($r->body, qq({"index":true}\n), "$m: unshielded -> shielded: target served");
    is($r->header('X-RateLimit-Remaining'), 2,
        "$m: unshielded -> shielded: counted once in the target (3 - 1)");
    is($entries->('open'), 1, "$m: unshielded -> shielded: one entry in Redis")
        if $m->cluster;

    SKIP: {
        skip 'nginx built without ngx_http_ssi_module', 9 + ($m->cluster ? 1 : 0)
            unless $has_ssi;

        # SSI subrequests into a shielded location (limit 1) are never
        # counted

        $r = get($t, 'ssi', '/page/p.html');
        is($r->status, 200, "$m: SSI page: 200");
        is($r->body, join("\n", ('{"inc":1}') x 3) . "\n",
            "$m: SSI: three includes of a limit-1 location all rendered");
        ok(!$r->has_header('X-RateLimit-Limit'),
            "$m: SSI: unshielded page has no rate-limit headers");
        $r = get($t, 'ssi', '/inc/a.json');
        is($r->status, 200, "$m: after the SSI page, a direct request passes");
        is($r->header('X-RateLimit-Remaining'), 0,
            "$m: the subrequests did not use the bucket");

        # a shielded page: the main request counts, its subrequests do not

        $r = get($t, 'spage', '/spage/p.html');
        is($r->status, 200, "$m: shielded SSI page: 200");
        is($r->header('X-RateLimit-Remaining'), 0, "$m: shielded SSI page: counted once");
        is($r->body, join("\n", ('{"inc":1}') x 3) . "\n",
            "$m: shielded SSI page: includes rendered, not challenged");
        is($entries->('spage', 1), 1, "$m: shielded SSI page: one entry in Redis")
            if $m->cluster;
        is(get($t, 'spage', '/spage/p.html')->status, 429,
            "$m: shielded SSI page: the next main request is 429");
    }
});

###############################################################################

Test::PowShield::Modes->done_testing;
