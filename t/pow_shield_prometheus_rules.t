#!/usr/bin/perl

# The example Prometheus alert rules (nginx-conf/prometheus/) are valid
# (promtool check rules), fire on the series they are written for and stay
# quiet on a healthy node (promtool test rules, with the unit tests next to
# them), and only use metric names the module serves (docs/metrics.md).

use strict;
use warnings;

use FindBin;
use Test::More;

###############################################################################

plan(skip_all => 'promtool not installed (Debian: prometheus)')
    unless `sh -c 'command -v promtool'`;

my $dir = "$FindBin::Bin/../nginx-conf/prometheus";

sub promtool {
    my (@args) = @_;
    my $pid = open my $fh, '-|';
    die "fork: $!" unless defined $pid;
    if ($pid == 0) {
        chdir $dir or die "$dir: $!";
        open STDERR, '>&', \*STDOUT;
        exec 'promtool', @args or exit 127;
    }
    local $/;
    my $out = <$fh> // '';
    close $fh;
    return ($? >> 8, $out);
}

my ($rc, $out) = promtool('check', 'rules', 'pow-shield.rules.yml');
is($rc, 0, 'promtool check rules: the rules are valid') or diag($out);

($rc, $out) = promtool('test', 'rules', 'pow-shield.rules.test.yml');
is($rc, 0, 'promtool test rules: each alert fires when it should, and only then')
    or diag($out);

# Names the rules use: the module's metrics (docs/metrics.md) and `up`.
my %served = map { $_ => 1 } qw(
    pow_shield_requests_total
    pow_shield_verifications_failed_total
    pow_shield_redis_fallback_active
    pow_shield_redis_errors_total
    pow_shield_redis_round_trip_seconds_bucket
    pow_shield_zone_refused_total
    pow_shield_breaker_trips_total
    pow_shield_bans_total
);
open my $fh, '<', "$dir/pow-shield.rules.yml" or die $!;
my $rules = do { local $/; <$fh> };
my @used = $rules =~ /(?<![\$\w])(pow_shield_[a-z_]+)\s*[{)\[]/g;
ok(@used >= 6, 'the rules watch the module\'s metrics');
is_deeply([grep { !$served{$_} } @used], [], 'every metric the rules use is one the module serves');

done_testing;
