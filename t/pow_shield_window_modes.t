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

my @modes = Test::PowShield::Modes->start($conf, redis => 'timeout=3s',
    files => { 'html/api/data.json' => "{}\n", 'html/rise/data.json' => "{}\n" });
plan(skip_all => 'cluster mode needs redis-server: nothing to compare')
    if @modes < 2;

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

# 60 quick requests in each mode, pipelined on one connection
my %burst_at;
for my $m (@modes) {
    $burst_at{$m} = time;
    my @rs = $m->node(1)->http_pipeline([('/api/data.json') x 60],
        'X-Client' => 'sixty');
    is(scalar(grep { ($_->status // 0) == 200 } @rs), 60,
        "$m: 60 requests to 60 1m pass");
    is($rs[-1]->header('X-RateLimit-Remaining'), 0, "$m: the 60th leaves 0");
}

# the 61st at once: refused until the first leaves, a minute after it came
my %now;
for my $m (@modes) {
    $now{$m} = seen($m->node(1)->http_get('/api/data.json', 'X-Client' => 'sixty'));
    is($now{$m}{status}, 429, "$m: the 61st at once is 429");
    ok($now{$m}{retry} >= 59 && $now{$m}{retry} <= 60,
        "$m: Retry-After a minute") or diag("Retry-After $now{$m}{retry}");
}

# 10 s after the burst (the last mode's): the issue's example
my $wait = $burst_at{ $modes[-1] } + 10 - time;
sleep($wait + 0.2) if $wait > 0;
my %later;
for my $m (@modes) {
    $later{$m} = seen($m->node(1)->http_get('/api/data.json', 'X-Client' => 'sixty'));
    my $since = time - $burst_at{$m};
    is($later{$m}{status}, 429, sprintf('%s: %.1f s after 60 requests: 429', $m, $since));
    is($later{$m}{remaining}, 0, "$m: Remaining 0");
    my $expect = 60 - $since;
    ok(abs($later{$m}{retry} - $expect) <= 1,
        sprintf('%s: Retry-After %.1f s, when the first request leaves', $m, $expect))
        or diag("Retry-After $later{$m}{retry}");
}

my ($local, $cluster) = map { $later{$_} } @modes;
is($local->{status}, $cluster->{status}, 'both modes: the same status');
is($local->{remaining}, $cluster->{remaining}, 'both modes: the same Remaining');
ok(abs($local->{retry} - $cluster->{retry}) <= 1,
    'both modes: Retry-After within 1 s')
    or diag("local $local->{retry}, cluster $cluster->{retry}");
# the bursts were a moment apart: Reset counts from each mode's own
for my $m (@modes) {
    my $after = $later{$m}{reset} - $burst_at{$m};
    ok(abs($after - 60) <= 1.5, "$m: Reset a minute after its burst")
        or diag("Reset $later{$m}{reset}, burst at $burst_at{$m}");
}

# the rising price: refusals in the window count alike, request by request
my %bits;
for my $m (@modes) {
    my @rs = map {
        $m->node(1)->http_get('/rise/data.json', 'X-Client' => 'riser')
    } 1 .. 10;
    $bits{$m} = join ' ', map { $_->status == 429 ? $_->header('X-PoW-Bits') // '?' : 'ok' } @rs;
}
is($bits{ $modes[0] }, $bits{ $modes[1] }, 'both modes: the same rising price')
    or diag(join "\n", map { "$_: $bits{$_}" } @modes);
is($bits{ $modes[0] }, 'ok ok 4 5 5 5 5 6 6 6',
    'the price rises by one bit as the refusals double the limit');

###############################################################################

$modes[0]->done_testing;
