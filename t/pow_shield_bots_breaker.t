#!/usr/bin/perl

# A client the circuit breaker has blocked is answered without any Web
# Bot Auth verification (docs/bots.md, "Blocked clients"): a flood of
# forged signatures in a bot's name from a blocked address costs the
# worker the cheap block response, not an Ed25519 verification each.  The
# verifications are counted by pow_shield_bot_bad_signatures_total{bot}
# (docs/metrics.md): a forged signature from a client that is not blocked
# counts one, from a blocked one none, whether the key is a map on
# $pow_shield_bot (the recipes of docs/bots.md) or the variable is only
# read after the decision (add_header).  A bot whose signature verifies
# keeps its own limit.  Local mode and cluster mode (one node on Redis: it
# answers a client whose block Redis reported from its zone).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use File::Temp qw(tempdir);
use Test::More;
use Test::PowShield qw(:util :redis);
use Test::PowShield::Metrics qw(scrape metric delta);
use Test::PowShield::Modes;

###############################################################################

my $cli = $ENV{TEST_POW_SHIELD_CLI} // "$Test::PowShield::REPO/objs/pow-shield";
plan(skip_all => "no $cli (make build)") unless -x $cli;

my $keys = tempdir(CLEANUP => 1);
my $dir = `$cli bot-key new $keys/examplebot.jwk 2>/dev/null`;
die "bot-key new failed\n" unless $? == 0 && $dir =~ /"keys"/;

# The signature headers of one request signed with examplebot's key.
sub signed {
    my ($url) = @_;
    my @lines = `$cli bot-key sign --sign-key $keys/examplebot.jwk $url`;
    die "bot-key sign failed\n" unless $? == 0 && @lines;
    return map { chomp; split /: /, $_, 2 } @lines;
}

# The same, with one base64 digit of the signature changed: it names
# examplebot's key (its keyid) and does not verify.
sub forged {
    my %h = signed(@_);
    $h{Signature} =~ s/^(sig1=:)(.)/$1 . ($2 eq 'A' ? 'B' : 'A')/e;
    return %h;
}

my $conf = http_conf(<<'EOF');
    pow_shield_secret "bots-breaker-suite-secret-0123456789abcdef";
    %%REDIS%%

    set_real_ip_from 127.0.0.1;
    real_ip_header X-Forwarded-For;

    pow_shield_bot_keys examplebot bots/examplebot.json;

    map $pow_shield_bot $pk {
        ""      $pow_shield_client;
        default bot:$pow_shield_bot;
    }

    server {
        %%TEST_SERVER%%

        add_header X-Bot $pow_shield_bot always;

        pow_shield_difficulty 1;
        pow_shield_limit 1 1h;
        pow_shield_strikes 2 60s;

        # the key is a map on $pow_shield_bot (docs/bots.md, "Recipes")
        location /api/ {
            pow_shield_key $pk;
        }

        # the default key; $pow_shield_bot is read by add_header only
        location /logged/ {
        }

        location = /metrics {
            pow_shield_limit off;
            pow_shield_status;
        }
    }
EOF

my %files = (
    'html/api/data.json'    => "{}\n",
    'html/logged/data.json' => "{}\n",
    'bots/examplebot.json'  => $dir,
);

my $n = 0;
Test::PowShield::Modes->each_mode($conf, redis => 'timeout=3s', files => \%files, sub {
    my ($m) = @_;
    $n++;
    my $t = $m->node(1);
    # Fresh addresses per mode: cluster mode's state lives in one Redis.
    my $ip = sub { "198.51.100." . ($n * 50 + $_[0]) };
    my $get = sub {
        my ($dir, $from, @headers) = @_;
        return $t->http_get("/$dir/data.json", @headers, 'X-Forwarded-For' => $ip->($from));
    };
    my $bad = sub { metric(scrape($t, '/metrics'), 'pow_shield_bot_bad_signatures_total',
        bot => 'examplebot') // 0 };
    my $url = 'http://localhost/api/data.json';

    # The counter counts: a forged signature from a client not blocked.
    my $before = $bad->();
    my $r = $get->('api', 1, forged($url));
    is($r->status, 200, 'a forged signature from a client not blocked: served as anonymous');
    is($r->header('X-Bot') // '', '', '... it is no bot');
    is($bad->() - $before, 1, '... and its verification is counted');

    # The map on $pow_shield_bot: block an address, then flood it with
    # forged signatures in examplebot's name.
    is(statuses(map { $get->('api', 2) } 1 .. 4), '200 429 429 403',
        'premise: an address that ignores two challenges is blocked');
    $before = $bad->();
    my @forged = map { $get->('api', 2, forged($url)) } 1 .. 5;
    is(statuses(@forged), '403 403 403 403 403',
        'forged signatures from the blocked address: the block response');
    is(join(',', map { $_->header('X-PoW-Shield') // '' } @forged), join(',', ('blocked') x 5),
        '... each one the breaker\'s');
    is($bad->() - $before, 0, '... and not one verification (key map)');
    is(join('', map { $_->header('X-Bot') // '' } @forged), '', '... none of them a bot');

    # A good signature from the blocked address is not verified either.
    my $verified = metric(scrape($t, '/metrics'), 'pow_shield_bot_requests_total',
        bot => 'examplebot') // 0;
    $r = $get->('api', 2, signed($url));
    is($r->status, 403, 'a good signature from the blocked address: blocked too');
    is(metric(scrape($t, '/metrics'), 'pow_shield_bot_requests_total', bot => 'examplebot') // 0,
        $verified, '... not verified');

    # A client that is not blocked keeps its signature: the bot's own
    # limit, counted under its name.
    $r = $get->('api', 3, signed($url));
    is($r->status, 200, 'a good signature from another address passes');
    is($r->header('X-Bot'), 'examplebot', '... as the bot');
    $r = $get->('api', 4, signed($url));
    is($r->status, 429, '... and the bot has one limit whatever its address (1)');
    is($r->header('X-Bot'), 'examplebot', '... still the bot');

    # The default key: the variable is only read for the response header.
    is(statuses(map { $get->('logged', 5) } 1 .. 4), '200 429 429 403',
        'premise: an address blocked where the key is the default one');
    $before = $bad->();
    @forged = map { $get->('logged', 5, forged($url)) } 1 .. 3;
    is(statuses(@forged), '403 403 403', 'forged signatures from it: the block response');
    is($bad->() - $before, 0, '... and not one verification (add_header)');
    $before = $bad->();
    $r = $get->('logged', 6, forged($url));
    is($bad->() - $before, 1, 'a forged signature from a client not blocked there is verified');
});

###############################################################################

Test::PowShield::Modes->done_testing;
