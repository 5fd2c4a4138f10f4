#!/usr/bin/perl

# A rotating scraper's log (pow_shield_log_summary, docs/directives.md): a
# challenge sent because a limit with its own key= had no room is counted
# under that limit and value, not under the client. 50 new addresses of a
# /24 over its key=$pow_shield_net limit write one full line for the /24
# (not one per address), and a summary line, once the interval passes,
# counts the other 49 ("49 more rejections under limit=net
# key=198.51.100.0/24 in the last 1 s"). A challenge paid by one of those
# addresses is no rejection of the /24's. A client over its own limit is
# still summarized per client. In both modes (Test::PowShield::Modes).

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
    pow_shield_secret "log-summary-keys-suite-secret-0123456789";
    pow_shield_difficulty 1;
    pow_shield_strikes off;

    set_real_ip_from 127.0.0.1;
    real_ip_header X-Real-IP;

    server {
        %%TEST_SERVER%%

        location /api/ {
            pow_shield_limit 3 1h;
            pow_shield_limit 5 1h name=net key=$pow_shield_net;
            pow_shield_log_summary 1s;
        }
    }
EOF
my %files = ('html/api/data.json' => '{"ok":true}');

sub from {
    my ($ip, %h) = @_;
    return $t->http_get('/api/data.json', 'X-Real-IP' => $ip, %h);
}

# the full lines of the /24's refusals (nginx appends the client)
sub net_lines {
    my ($net) = @_;
    return $t->error_log_count(
        qr/pow_shield: over the limit, challenge sent: limit=net key=\Q$net\E, client: /);
}

# the summary lines of a /24, and the rejections they count
my $UNDER = qr/pow_shield: ([\d,]+) more rejections? under limit=net key=(\S+) in the last (\d+) s/;
sub summarized { return $t->summarized_count($UNDER, $_[0]) }

###############################################################################

Test::PowShield::Modes->each_mode($conf, redis => 'timeout=3s', files => \%files, sub {
    my ($m) = @_;
    $t = $m->node(1);

    # a scraper on 55 addresses of one /24, one request each: its 5 pass,
    # then 50 new addresses are refused by the /24's limit

    is(statuses(map { from("198.51.100.$_") } 1 .. 5), '200 200 200 200 200',
        'premise: the /24\'s first 5 pass');
    my @r = map { from("198.51.100.$_") } 6 .. 55;
    is(scalar(grep { ($_->status // 0) == 429 } @r), 50,
        'premise: its 50 new addresses are challenged');
    is(net_lines('198.51.100.0/24'), 1,
        'one full line for the /24, not one per address');
    is($t->error_log_count(qr/more rejections? of client=198\.51\.100\./), 0,
        'and no client of it has a summary of its own');
    ok(eventually(20, sub { summarized('198.51.100.0/24') >= 49 }),
        'once the interval passes, a summary line counts the other 49');
    is(summarized('198.51.100.0/24'), 49, '... exactly them');
    my ($line) = $t->error_log_lines(qr/under limit=net key=198\.51\.100\.0\/24 /);
    like($line // '', qr/\[warn\] \d+#\d+: pow_shield: [\d,]+ more rejections? under limit=net key=198\.51\.100\.0\/24 in the last \d+ s$/,
        'summary line: at the location\'s log level, count, limit and /24, interval');

    # another /24's addresses that pay their challenges: paid ones are no
    # rejections of the /24's

    is(statuses(map { from("203.0.113.$_") } 1 .. 5), '200 200 200 200 200',
        'premise: the other /24\'s first 5 pass');
    my @paid;
    for my $host (6 .. 15) {
        my $c = from("203.0.113.$host");
        push @paid, $c->status, from("203.0.113.$host", solution($c))->status;
    }
    is("@paid", join(' ', ('429 200') x 10), 'premise: ten addresses, each pays its challenge');
    is(statuses(map { from("203.0.113.$_") } 16 .. 18), '429 429 429',
        'premise: three more do not pay');
    is(net_lines('203.0.113.0/24'), 1, 'the payers\' /24: one full line');

    # a client over its own limit: counted per client as ever

    is(statuses(map { from('192.0.2.7') } 1 .. 10), join(' ', ('200') x 3, ('429') x 7),
        'premise: a client over its own limit');
    is($t->error_log_count(qr/challenge sent: limit=3r\/h, client: 192\.0\.2\.7,/), 1,
        'its first refusal: a full line');

    ###############################################################################

    # the worker exits: the counts left are written

    $t->stop;
    is(summarized('198.51.100.0/24'), 49, 'the rotating scraper: every rejection counted once');
    # 12 challenges counted, 9 of them paid (each address's payment is
    # credited to the /24 while it owes one; a payment crossing an
    # interval's end may be counted in the next one)
    cmp_ok(summarized('203.0.113.0/24'), '<=', 5,
        'the payers\' /24: its paid challenges are left out');
    ok(scalar(grep { /key=203\.0\.113\.0\/24 .*; \d+ paid, not counted\)$/ }
            $t->error_log_lines($UNDER)),
        '... and its line says how many paid ones it left out');
    my $own = qr/pow_shield: ([\d,]+) more rejections? of client=192\.0\.2\.7 in the last/;
    my $n = 0;
    $n += ($_ =~ $own)[0] for $t->error_log_lines($own);
    is($n, 6, 'a client over its own limit: its summary names it');
});

###############################################################################

Test::PowShield::Modes->done_testing;
