#!/usr/bin/perl

# One limit, one meaning (issue 26 point 8; SPEC §2 and §6): local mode
# counts a sliding window as cluster mode's log does (docs/directives.md,
# pow_shield_limit), so the same requests get the same statuses and headers
# in both modes.  "pow_shield_limit 60 1m": 60 quick requests pass; 10 s
# later the next one is refused in both modes with Remaining 0 and
# Retry-After 50 s (the leaky bucket answered 200 with Remaining 9), and
# the rising price over the refusals is the same.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Time::HiRes qw(time sleep);
use Test::PowShield qw(http_conf);
use Test::PowShield::Modes;
use Test::PowShield::Redis;

###############################################################################

my $conf = http_conf(<<'EOF', workers => 1);
    pow_shield_secret "window-modes-suite-secret-0123456789ab";
    %%REDIS%%

    server {
        %%TEST_SERVER%%

        pow_shield_key $http_x_client;

        location /api/ {
            pow_shield_limit 60 1m;
            pow_shield_strikes off;
        }

        # the rising price reads the refusals counted in the window
        location /rise/ {
            pow_shield_limit 2 1h;
            pow_shield_difficulty 4b max=12b;
            pow_shield_strikes off;
        }
    }
EOF

plan(skip_all => 'cluster mode needs redis-server: nothing to compare')
    unless Test::PowShield::Redis->available;

###############################################################################

# the headers both modes must agree on
sub seen {
    my ($r) = @_;
    my %h = (
        status => $r->status // 0,
        remaining => $r->header('X-RateLimit-Remaining') // '',
        reset => $r->header('X-RateLimit-Reset') // 0,
        retry => $r->header('Retry-After') // 0,
    );
    note(join ' ', map { "$_=$h{$_}" } sort keys %h);
    return \%h;
}

# what each mode answered 10 s after its burst, and its rising price
my (%later, %bits);

my @modes = Test::PowShield::Modes->each_mode($conf, redis => 'timeout=3s',
    files => { 'html/api/data.json' => "{}\n", 'html/rise/data.json' => "{}\n" },
    sub {
    my ($m) = @_;
    my $t = $m->node(1);

    # 60 quick requests, pipelined on one connection
    my $burst_at = time;
    my @rs = $t->http_pipeline([('/api/data.json') x 60], 'X-Client' => 'sixty');
    is(scalar(grep { ($_->status // 0) == 200 } @rs), 60, '60 requests to 60 1m pass');
    is($rs[-1]->header('X-RateLimit-Remaining'), 0, 'the 60th leaves 0');

    # the 61st at once: refused until the first leaves, a minute after it came
    my $now = seen($t->http_get('/api/data.json', 'X-Client' => 'sixty'));
    is($now->{status}, 429, 'the 61st at once is 429');
    ok($now->{retry} >= 59 && $now->{retry} <= 60, 'Retry-After a minute')
        or diag("Retry-After $now->{retry}");

    # 10 s after the burst: the issue's example
    my $wait = $burst_at + 10 - time;
    sleep($wait + 0.2) if $wait > 0;
    my $later = $later{$m} = seen($t->http_get('/api/data.json', 'X-Client' => 'sixty'));
    my $since = time - $burst_at;
    is($later->{status}, 429, sprintf('%.1f s after 60 requests: 429', $since));
    is($later->{remaining}, 0, 'Remaining 0');
    my $expect = 60 - $since;
    ok(abs($later->{retry} - $expect) <= 1,
        sprintf('Retry-After %.1f s, when the first request leaves', $expect))
        or diag("Retry-After $later->{retry}");
    # Reset counts from the mode's own burst
    my $after = $later->{reset} - $burst_at;
    ok(abs($after - 60) <= 1.5, 'Reset a minute after the burst')
        or diag("Reset $later->{reset}, burst at $burst_at");

    # the rising price: refusals in the window count alike, request by request
    my @rise = map { $t->http_get('/rise/data.json', 'X-Client' => 'riser') } 1 .. 10;
    $bits{$m} = join ' ',
        map { $_->status == 429 ? $_->header('X-PoW-Bits') // '?' : 'ok' } @rise;
    is($bits{$m}, 'ok ok 4 5 5 5 5 6 6 6',
        'the price rises by one bit as the refusals double the limit');
});

# the modes side by side (10 s after each one's burst: the same moment of
# the window)
my ($local, $cluster) = map { $later{$_} } @modes;
is($local->{status}, $cluster->{status}, 'both modes: the same status');
is($local->{remaining}, $cluster->{remaining}, 'both modes: the same Remaining');
ok(abs($local->{retry} - $cluster->{retry}) <= 1,
    'both modes: Retry-After within 1 s')
    or diag("local $local->{retry}, cluster $cluster->{retry}");
is($bits{ $modes[0] }, $bits{ $modes[1] }, 'both modes: the same rising price')
    or diag(join "\n", map { "$_: $bits{$_}" } @modes);

###############################################################################

Test::PowShield::Modes->done_testing;
