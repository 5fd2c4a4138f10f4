#!/usr/bin/perl

# The rejection line names the limit that refused the request
# (docs/operations.md, "Troubleshooting from the error log"): its name=
# (or the name its numbers give), and for a limit with key= the value it
# counted: "pow_shield: over the limit, challenge sent: limit=net
# key=198.51.100.0/24". A limit per client key names no key (nginx's
# "client:" is it); a value is escaped (a header cannot forge a field); a
# failed solution of a request over its limit names the limit too. The
# metrics name the refusing limit (pow_shield_requests_total{limit}). In
# both modes.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Test::PowShield qw(:pow :util);
use Test::PowShield::Modes;
use Test::PowShield::Metrics qw(scrape metric);

###############################################################################

my $conf = http_conf(<<'EOF');
    %%REDIS%%
    pow_shield_secret "log-limits-suite-secret-0123456789abcd";
    pow_shield_difficulty 1;
    pow_shield_strikes off;

    set_real_ip_from 127.0.0.1;
    real_ip_header X-Real-IP;

    server {
        %%TEST_SERVER%%

        # 2 an hour per address, 4 an hour per /24
        location /net/ {
            pow_shield_limit 2 1h;
            pow_shield_limit 4 1h name=net key=$pow_shield_net;
        }

        # 1 an hour per tenant
        location /tenant/ {
            pow_shield_limit 1 1h name=tenant key=$http_x_tenant;
        }

        # one unnamed limit
        location /plain/ {
            pow_shield_limit 1 1h;
            pow_shield_log_summary off;
        }

        location = /metrics {
            pow_shield_status;
        }
    }
EOF

my %files = map { ("html/$_/data.json" => '{"ok":true}') } qw(net tenant plain);

Test::PowShield::Modes->each_mode($conf, files => \%files, sub {
    my ($m) = @_;
    my $t = $m->node(1);
    my $get = sub {
        my ($ip, $where, @h) = @_;
        return $t->http_get("/$where/data.json", 'X-Real-IP' => $ip, @h);
    };
    my $lines = sub {
        my ($ip, $words) = @_;
        return $t->error_log_count(
            qr/pow_shield: over the limit, challenge sent: \Q$words\E, client: \Q$ip\E,/);
    };

    # a /24 over its limit: the line names "net" and the /24

    is(statuses(map { $get->("198.51.100.$_", 'net') } 1 .. 5), '200 200 200 200 429',
        'premise: the /24\'s fifth request is refused');
    is($lines->('198.51.100.5', 'limit=net key=198.51.100.0/24'), 1,
        'the line names the limit and the /24: limit=net key=198.51.100.0/24');

    # an address over its own limit: the line names the limit, no key

    is(statuses(map { $get->('203.0.113.9', 'net') } 1 .. 3), '200 200 429',
        'premise: an address over its own 2');
    is($lines->('203.0.113.9', 'limit=2r/h'), 1,
        'a limit per client key: named by its numbers, with no key: limit=2r/h');
    my @own = map { $get->('192.0.2.7', 'plain') } 1 .. 2;
    is(statuses(@own), '200 429', 'premise: an unnamed limit refuses the second');
    is($lines->('192.0.2.7', 'limit=1r/h'), 1, 'a location\'s one unnamed limit: limit=1r/h');

    # a value from a header is escaped: no forged field or line

    is(statuses(map { $get->('192.0.2.20', 'tenant', 'X-Tenant' => 'a "b", client: x') } 1 .. 2),
        '200 429', 'premise: a tenant over its limit');
    is($lines->('192.0.2.20', 'limit=tenant key=a\x20\x22b\x22,\x20client:\x20x'), 1,
        'the value is escaped (space, quote)');

    # a failed solution of a request over its limit names it too

    my ($challenge) = grep { ($_->status // 0) == 429 } @own;
    my %wrong = solution($challenge, wrong => 1);
    is($t->http_get('/plain/data.json', 'X-Real-IP' => '192.0.2.7', %wrong)->status, 422,
        'premise: a wrong solution: 422');
    is($t->error_log_count(
        qr/pow_shield: solution rejected: solution: limit=1r\/h, client: 192\.0\.2\.7,/), 1,
        'a failed solution over the limit: the line names the limit');

    # the metrics name the refusing limit

    my $metrics = scrape($t);
    is(metric($metrics, 'pow_shield_requests_total', result => 'challenge', limit => 'net'), 1,
        'metrics: the /24\'s refusal under limit="net"');
    is(metric($metrics, 'pow_shield_requests_total', result => 'challenge', limit => '2r/h'), 1,
        'metrics: the address\'s refusal under its own limit');
});

###############################################################################

Test::PowShield::Modes->done_testing;
