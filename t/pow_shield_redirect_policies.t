#!/usr/bin/perl

# An internal redirect into a location with another shield policy decides
# the request again under that policy (docs/directives.md, "Internal
# redirects"): a cheap location's try_files, index, named location,
# X-Accel-Redirect or "error_page ... =" does not serve a dear location's
# content for free.  A request is counted once per distinct policy, never
# twice under one (two locations that count and price alike are one, also
# when each writes its own lines); a redirect into an unshielded location
# stays free; an error page with its status fixed presents the answer
# already decided (a 403 of deny), counted nowhere more; post_action is
# never decided.  A client that pays under the first policy is no offence
# at the second: paying every challenge of both never blocks it.  Local
# mode and cluster mode (Test::PowShield::Modes).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Test::PowShield qw(:pow :util);
use Test::PowShield::Modes;

###############################################################################

my $conf = http_conf(<<'EOF');
    pow_shield_secret "redirect-policies-suite-secret-0123456789ab";
    %%REDIS%%

    server {
        %%TEST_SERVER%%

        add_header X-Result $pow_shield_result always;
        add_header X-Strikes $pow_shield_strikes always;

        pow_shield_key $http_x_client;
        pow_shield_difficulty 1;
        pow_shield_limit 3 1h;

        # issue 36, finding 5: a cheap location falls back to a dear one
        location /pub/ {
            pow_shield_limit 100 1m;
            try_files $uri /export/data.json;
        }

        location /export/ {
            pow_shield_limit 1 1h;
            pow_shield_difficulty 8b;
        }

        # the other redirects into it
        location /idx/ {
            pow_shield_limit 100 1m;
            index /export/data.json;
        }

        location /named/ {
            pow_shield_limit 100 1m;
            try_files $uri @dear;
        }

        # counts and prices as /export/ does: the same buckets
        location @dear {
            pow_shield_limit 1 1h;
            pow_shield_difficulty 8b;
            try_files /export/data.json =404;
        }

        location /accel/ {
            pow_shield_limit 100 1m;
            proxy_pass http://127.0.0.1:%%PORT_8081%%;
        }

        location /fallback/ {
            pow_shield_limit 100 1m;
            error_page 404 = /export/data.json;
        }

        # over both limits
        location /cheap/ {
            pow_shield_limit 2 1h;
            try_files $uri /dear/data.json;
        }

        location /dear/ {
            pow_shield_limit 1 1h;
            pow_shield_difficulty 8b;
        }

        # one limit (one bucket), two prices
        location /price-a/ {
            pow_shield_limit 2 1h;
            try_files $uri /price-b/data.json;
        }

        location /price-b/ {
            pow_shield_limit 2 1h;
            pow_shield_difficulty 8b;
        }

        # one policy: the server's, inherited by both
        location /same-a/ {
            try_files $uri /same-b/data.json;
        }

        location /same-b/ {
        }

        # one policy: the same lines written in each
        location /twin-a/ {
            pow_shield_limit 5 1h;
            try_files $uri /twin-b/data.json;
        }

        location /twin-b/ {
            pow_shield_limit 5 1h;
        }

        location /to-free/ {
            pow_shield_limit 100 1m;
            try_files $uri /free/data.json;
        }

        location /free/ {
            pow_shield_limit off;
        }

        # an error page with its status fixed, after a decision
        location /denied/ {
            pow_shield_limit 100 1m;
            deny all;
            error_page 403 /errdoc/403.json;
        }

        location /errdoc/ {
            pow_shield_limit 1 1h;
        }

        # an error page into a shielded location, decided there first
        location /plain/ {
            pow_shield_limit off;
            error_page 404 /errdoc2/404.json;
        }

        location /errdoc2/ {
            pow_shield_limit 1 1h;
        }

        location /pa/ {
            pow_shield_limit 100 1m;
            post_action /pa-target/done.json;
        }

        location /pa-target/ {
            pow_shield_limit 1 1h;
        }
    }

    server {
        listen 127.0.0.1:%%PORT_8081%%;
        server_name backend;

        location / {
            add_header X-Accel-Redirect /export/data.json;
            return 200 "backend\n";
        }
    }
EOF

my %files = (
    'html/pub/real.json' => qq({"pub":true}\n),
    'html/export/data.json' => qq({"export":true}\n),
    'html/dear/data.json' => qq({"dear":true}\n),
    'html/same-b/data.json' => qq({"same":true}\n),
    'html/twin-b/data.json' => qq({"twin":true}\n),
    'html/price-b/data.json' => qq({"price":true}\n),
    'html/free/data.json' => qq({"free":true}\n),
    'html/errdoc/403.json' => qq({"errdoc":403}\n),
    'html/errdoc2/404.json' => qq({"errdoc2":404}\n),
    'html/pa/data.json' => qq({"pa":true}\n),
    'html/pa-target/done.json' => qq({"done":true}\n),
);

my $EXPORT = qq({"export":true}\n);

###############################################################################

Test::PowShield::Modes->each_mode($conf, redis => 'timeout=3s', files => \%files, sub {
    my ($m) = @_;
    my $t = $m->node(1);
    my $get = sub {
        my ($client, $uri, @h) = @_;
        return $t->http_get($uri, 'X-Client' => $client, @h);
    };

    # try_files from /pub/ (100 a minute) to /export/ (1 an hour, 8 bits)

    is($get->('f', '/export/data.json')->status, 200, 'premise: /export/ served once');
    my @r = map { $get->('f', "/pub/x$_") } 0 .. 3;
    is(statuses(@r), '429 429 429 429',
        'try_files into a dear location: decided again there, 429');
    is(join('', map { $_->body =~ /"export"/ ? 'leak' : '' } @r), '',
        '... the dear content is never served');
    is($r[0]->header('X-PoW-Bits'), 8, '... at the dear location\'s price');
    my $r = $get->('f', '/pub/real.json');
    is($r->status, 200, 'the cheap location still serves its own content');
    is($r->header('X-RateLimit-Remaining'), 100 - 5,
        '... each redirected request counted once under its policy');
    $r = $get->('f', '/pub/x3', solution($r[3]));
    is($r->status, 200, 'paying the dear challenge: the content');
    is($r->body, $EXPORT, '... the dear location\'s');
    is($r->header('X-Result'), 'solved', '... solved under the dear policy');

    # the other redirects

    for my $case (['index', '/idx/'], ['a named location', '/named/x'],
        ['X-Accel-Redirect', '/accel/x'], ['error_page =', '/fallback/missing']) {
        my ($what, $uri) = @$case;
        my $client = "via $what";
        is($get->($client, '/export/data.json')->status, 200, "premise ($what): /export/ served once");
        $r = $get->($client, $uri);
        is($r->status, 429, "$what into the dear location: 429");
        is($r->header('X-PoW-Bits'), 8, "$what: at its price");
    }

    # over both limits: paying the first policy is no offence at the second

    is($get->('g', '/dear/data.json')->status, 200, 'premise: /dear/ served once');
    is($get->('g', '/cheap/a')->status, 429, 'under the cheap limit, over the dear one: the dear 429');
    $r = $get->('g', '/cheap/a');
    is($r->status, 429, 'the cheap limit\'s last request: the dear 429 again');
    my (@statuses, @strikes);
    my $st = '';
    for (1 .. 8) {
        # the dear token at the cheap location, now over its limit: no
        # payment there (the first time a refusal, docs/protocol.md 6)
        $r = $get->('g', '/cheap/a', solution($r));
        push @statuses, $r->status;
        # the cheap challenge, paid: the dear location asks its own
        $r = $get->('g', '/cheap/a', solution($r));
        push @statuses, $r->status;
        $st .= (decode_token($r->header('X-PoW-Challenge')) || {})->{payload}{st} // '?';
        push @strikes, $r->header('X-Strikes');
    }
    is(join(' ', @statuses), join(' ', '409', ('429') x 15),
        'a client paying every challenge of two policies: never blocked');
    is($st, '0' x 8, '... the dear 429 after a paid cheap one counts no strike');
    is(join(' ', @strikes), join(' ', ($strikes[0]) x 8), '... paying adds no strike');

    # one policy, never counted twice

    @r = map { $get->('q', '/price-a/x') } 1 .. 3;
    is(statuses(@r), '200 200 429',
        'one limit at two prices: a redirected request counted once in it');
    is($r[1]->body, qq({"price":true}\n), '... green at one price, green at the other');
    is($r[2]->header('X-PoW-Bits'), 4, '... over it, the first location asks its price');

    $r = $get->('s', '/same-a/x');
    is($r->body, qq({"same":true}\n), 'a redirect under the policy both inherit: served');
    is($r->header('X-RateLimit-Remaining'), 2, '... counted once (3 - 1)');
    is($get->('s', '/same-a/x')->header('X-RateLimit-Remaining'), 1, '... and once again');
    $r = $get->('w', '/twin-a/x');
    is($r->body, qq({"twin":true}\n), 'a redirect between locations with the same lines: served');
    is($r->header('X-RateLimit-Remaining'), 4, '... counted once (5 - 1)');

    # into an unshielded location: free

    $r = $get->('u', '/to-free/x');
    is($r->body, qq({"free":true}\n), 'a redirect into an unshielded location: served');
    is($r->header('X-RateLimit-Remaining'), 99, '... counted once, where it was asked for');

    # an error page with its status fixed presents the answer decided

    @r = map { $get->('d', '/denied/x') } 1 .. 3;
    is(statuses(@r), '403 403 403', 'deny, then an error page in a shielded location: 403');
    is($r[2]->body, qq({"errdoc":403}\n), '... the error document, never a challenge');
    is($get->('d', '/errdoc/403.json')->header('X-RateLimit-Remaining'), 0,
        '... which counted none of them (1 - 1)');

    # an error page that is the request's first decision

    is($get->('e', '/plain/missing')->status, 404, 'an unshielded 404\'s error page: 404');
    $r = $get->('e', '/plain/missing');
    is($r->status, 429, 'over the error page location\'s limit: the 429, with its own status');
    ok($r->header('X-PoW-Challenge'), '... and its challenge');

    # post_action is never decided

    is($get->('p', '/pa/data.json')->status, 200, 'a location with post_action: served');
    is($get->('p', '/pa-target/done.json')->header('X-RateLimit-Remaining'), 0,
        'post_action into another policy counted nothing there (1 - 1)');
});

###############################################################################

Test::PowShield::Modes->done_testing;
