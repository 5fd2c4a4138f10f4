#!/usr/bin/perl

# Logs under a flood (pow_shield_log_summary, docs/directives.md): the
# first rejection of a client for each reason is logged in full, the rest
# are counted into at most one summary line per client and interval
# ("N more rejections of client=... in the last T s"), and no rejection is
# lost: the counts of the summary lines, the last ones written when the
# worker exits, add up to every rejection not logged (a challenge the
# client paid is none: the line says how many it left out).  The breaker and ban
# lines (fail2ban's) are never summarized; "off" logs every rejection.
# In both modes (Test::PowShield::Modes).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Test::PowShield qw(:pow :util);
use Test::PowShield::Modes;

###############################################################################

my $t;    # the node of the mode under test (each_mode below)
my $conf = http_conf(<<'EOF');
    %%REDIS%%
    pow_shield_secret "log-summary-suite-secret-0123456789abc";
    pow_shield_difficulty 1;

    set_real_ip_from 127.0.0.1;
    real_ip_header X-Real-IP;

    server {
        %%TEST_SERVER%%

        location /api/ {
            pow_shield_limit 1 1h;
            pow_shield_strikes off;
            pow_shield_log_summary 1s;
        }

        location /ban/ {
            pow_shield_limit 1 1h;
            pow_shield_strikes 2 1h;
            pow_shield_ban 1h after=1;
            pow_shield_log_summary 1s;
        }

        location /every/ {
            pow_shield_limit 1 1h;
            pow_shield_strikes off;
            pow_shield_log_summary off;
        }

        location /default/ {
            pow_shield_limit 1 1h;
            pow_shield_strikes off;
        }
    }
EOF
my %files = map { ("html/$_/data.json" => '{"ok":true}') } qw(api ban every default);
###############################################################################

# $n requests of one client on one keep-alive connection
sub flood {
    my ($ip, $where, $n, %h) = @_;
    return $t->http_pipeline([("/$where/data.json") x $n], 'X-Real-IP' => $ip, %h);
}

sub from {
    my ($ip, $where, %h) = @_;
    return $t->http_get("/$where/data.json", 'X-Real-IP' => $ip, %h);
}

# the lines of the rejections themselves (nginx appends the client)
sub rejections {
    my ($ip, $what) = @_;
    # (a refusal by a limit names it: t/pow_shield_log_limits.t)
    return $t->error_log_count(qr/pow_shield: \Q$what\E(?:: limit=\S+)?, client: \Q$ip\E,/);
}

# the summary lines of a client, and the rejections they count
my $SUMMARY = qr/pow_shield: ([\d,]+) more rejections? of client=(\S+) in the last (\d+) s/;
sub summarized { return $t->summarized_count($SUMMARY, $_[0]) }

###############################################################################

Test::PowShield::Modes->each_mode($conf, redis => 'timeout=3s', files => \%files, sub {
    my ($m) = @_;
    $t = $m->node(1);


    ###############################################################################

    # one client floods: 1 pass, then 300 rejections: one line, then summaries

    is(from('192.0.2.7', 'api')->status, 200, 'premise: under the limit: 200');
    my @r = flood('192.0.2.7', 'api', 300);
    is(scalar(grep { ($_->status // 0) == 429 } @r), 300, 'premise: the flood gets 300 429s');
    is(rejections('192.0.2.7', 'over the limit, challenge sent'), 1,
        'the first rejection is logged in full, once');

    # a second reason of the same client: its first line too, then counted

    my %wrong = solution($r[0], wrong => 1);
    is(statuses(map { from("192.0.2.7", "api", %wrong) } 1 .. 6),
        join(' ', ('422') x 6), 'premise: six wrong solutions: 422');
    is(rejections('192.0.2.7', 'solution rejected: solution'), 1,
        'a new reason of the same client: its first line, once');

    # another client is another client

    flood('192.0.2.8', 'api', 20);
    is(rejections('192.0.2.8', 'over the limit, challenge sent'), 1,
        'another client: its own first line');

    # the interval (1s) ends while nginx runs: the timer writes the summary

    ok(eventually(10, sub { summarized('192.0.2.7') > 0 }),
        'a summary line comes while the flood is over, from the timer');
    my ($line) = grep { /client=192\.0\.2\.7 / } $t->error_log_lines($SUMMARY);
    like($line // '', qr/\[warn\] \d+#\d+: pow_shield: [\d,]+ more rejections of client=192\.0\.2\.7 in the last \d+ s$/,
        'summary line: at the location\'s log level, count, client, interval');

    # a client that is already summarized gets banned: the breaker and ban
    # lines are written all the same

    flood('192.0.2.20', 'api', 10);
    is(statuses(map { from('192.0.2.20', 'ban') } 1 .. 4), '429 429 403 403',
        'premise: (the count the same limit has in /api/) two offences open the breaker and ban');
    flood('192.0.2.20', 'ban', 50);
    is($t->error_log_count(qr/pow_shield: breaker opened: client=192\.0\.2\.20 key=address/), 1,
        'the breaker line of a summarized client is written');
    is($t->error_log_count(qr/pow_shield: client banned: client=192\.0\.2\.20 key=address/), 1,
        'the ban line of a summarized client is written');
    is(rejections('192.0.2.20', 'banned'), 1, 'its banned rejections: the first line, once');

    # off: every rejection its own line; the default (10s) summarizes

    flood('192.0.2.30', 'every', 21);
    is(rejections('192.0.2.30', 'over the limit, challenge sent'), 20,
        'pow_shield_log_summary off: one line per rejection');
    flood('192.0.2.40', 'default', 101);
    is(rejections('192.0.2.40', 'over the limit, challenge sent'), 1,
        'by default: one line for a flood of 100 rejections');

    # a client that pays its challenges: paid 429s are no rejections

    is(from('192.0.2.50', 'api')->status, 200, 'premise: the payer\'s first request: 200');
    my @paid;
    for (1 .. 10) {
        my $c = from('192.0.2.50', 'api');
        push @paid, $c->status, from('192.0.2.50', 'api', solution($c))->status;
    }
    is("@paid", join(' ', ('429 200') x 10), 'premise: ten challenges, each paid');
    is(statuses(map { from('192.0.2.50', 'api') } 1 .. 3), '429 429 429',
        'premise: then three it does not pay');

    ###############################################################################

    # the worker exits: the counts left are written; nothing is lost

    $t->stop;
    is(summarized('192.0.2.7'), 299 + 5,
        'every rejection not logged is counted in a summary line (flood and wrong solutions)');
    is(summarized('192.0.2.8'), 18, '... of the other client');
    is(summarized('192.0.2.20'), 8 + 2 + 1 + 50,
        '... of the banned client (429s in /api/ and /ban/, then banned)');
    is(summarized('192.0.2.30'), 0, '... and none where every rejection was logged');
    is(summarized('192.0.2.40'), 99, '... by default, written when the worker exits');
    # 12 challenges not logged in full, 10 of them paid (one paid in the
    # next interval at most: it is counted then)
    cmp_ok(summarized('192.0.2.50'), '<=', 3,
        'a payer\'s summaries leave its paid challenges out');
    ok(scalar(grep { /client=192\.0\.2\.50 .*; \d+ paid, not counted\)$/ }
            $t->error_log_lines($SUMMARY)),
        '... and say how many paid ones they left out');
});

###############################################################################

Test::PowShield::Modes->done_testing;
