#!/usr/bin/perl

# The example Prometheus alert rules (nginx-conf/prometheus/) are valid
# (promtool check rules); every rule has a unit test where it fires and one
# where it stays silent, and they pass (promtool test rules, with the test
# files next to them); the rules only read metrics the module serves (a real
# scrape of pow_shield_status) and `up` of the job docs/metrics.md tells the
# operator to scrape.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Test::PowShield;
use Test::PowShield::Metrics qw(served_scrape names promql_names);

###############################################################################

plan(skip_all => 'promtool not installed (Debian: prometheus)')
    unless `sh -c 'command -v promtool'`;

my $dir = "$FindBin::Bin/../nginx-conf/prometheus";
my $RULES = 'pow-shield.rules.yml';

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

sub slurp {
    my ($file) = @_;
    open my $fh, '<', $file or die "$file: $!";
    local $/;
    return <$fh>;
}

# The rules file's alerts: [name, expr], expr folded to one line (inline,
# or a block scalar indented under "expr:").
sub alerts {
    my @lines = split /\n/, slurp("$dir/$RULES");
    my (@alerts, $expr_indent);
    for my $line (@lines) {
        if (defined $expr_indent) {
            if ($line =~ /^(\s*)\S/ && length($1) > $expr_indent) {
                (my $text = $line) =~ s/^\s+//;
                $alerts[-1][1] .= ($alerts[-1][1] eq '' ? '' : ' ') . $text;
                next;
            }
            undef $expr_indent;
        }
        if ($line =~ /^\s*- alert:\s*(\S+)/) {
            push @alerts, [$1, ''];
        } elsif (@alerts && $line =~ /^(\s*)expr:\s*(.*?)\s*$/) {
            my ($indent, $text) = (length $1, $2);
            if ($text =~ /^[>|]/) {
                $expr_indent = $indent;
            } else {
                $alerts[-1][1] = $text;
            }
        }
    }
    return @alerts;
}

###############################################################################

my ($rc, $out) = promtool('check', 'rules', $RULES);
is($rc, 0, 'promtool check rules: the rules are valid') or diag($out);

my @alerts = alerts();
my ($count) = $out =~ /SUCCESS: (\d+) rules found/;
is(scalar @alerts, $count // -1, 'every rule promtool found is read here: '
    . scalar(@alerts) . ' alerts');

# promtool test rules on every test file; which alerts each case expects to
# fire (exp_alerts listed) or to stay silent (exp_alerts: [])

my @tests = map { s{.*/}{}r } sort glob "$dir/*.test.yml";
ok(@tests, 'unit test files: ' . join(' ', @tests));
($rc, $out) = promtool('test', 'rules', @tests);
is($rc, 0, 'promtool test rules: every case passes') or diag($out);

my (%fires, %silent);
for my $test (@tests) {
    my $alert;
    for (split /\n/, slurp("$dir/$test")) {
        $alert = $1 if /^\s*alertname:\s*(\S+)/;
        next unless defined $alert && /^\s*exp_alerts:\s*(.*?)\s*$/;
        ($1 eq '[]' ? $silent{$alert} : $fires{$alert})++;
        undef $alert;
    }
}
for (@alerts) {
    my $name = $_->[0];
    ok($fires{$name}, "$name: a case where it fires");
    ok($silent{$name}, "$name: a case where it stays silent");
}
my %known = map { $_->[0] => 1 } @alerts;
is_deeply([grep { !$known{$_} } sort keys %fires, keys %silent], [],
    'the tests name no alert the rules lack');

# the job: the alert on `up` selects the job name docs/metrics.md scrapes with

my ($docs_job) = slurp("$FindBin::Bin/../docs/metrics.md") =~ /^\s*- job_name:\s*(\S+)/m;
my @up = map { $_->[1] =~ /\bup\{[^}]*\bjob="([^"]+)"/ ? [$_->[0], $1] : () } @alerts;
ok(@up, 'an alert watches the scrape itself (up)');
for (@up) {
    is($_->[1], $docs_job // '', "$_->[0] selects job=\"$_->[1]\", the job_name of docs/metrics.md");
}
my ($header_job) = slurp("$dir/$RULES") =~ /^#\s+- job_name:\s*(\S+)/m;
is($header_job, $docs_job, 'the rules file\'s scrape example uses the same job_name');

# the fail2ban jails (nginx-conf/fail2ban/jail.d/): each bans on what one
# metric counts (mode=breaker: breaker openings; mode=ban: bans), and an
# alert watches that metric, so the recommended jail's bans, made without
# pow_shield_ban, are watched too

my %counts = (breaker => 'pow_shield_breaker_trips_total', ban => 'pow_shield_bans_total');
my $jails = slurp("$FindBin::Bin/../nginx-conf/fail2ban/jail.d/pow-shield.conf");
my %mode_of;
for my $section (split /^(?=\[)/m, $jails) {
    my ($name) = $section =~ /^\[([\w-]+)\]/ or next;
    my ($filter) = $section =~ /^filter\s*=\s*(\S+)/m;
    $mode_of{$name} = ($filter // '') =~ /\[mode=(\w+)\]/ ? $1 : 'breaker';
}
ok($mode_of{'pow-shield'}, "the recommended jail [pow-shield] bans on mode=$mode_of{'pow-shield'}");
for my $jail (sort keys %mode_of) {
    my $metric = $counts{$mode_of{$jail}} // '(none)';
    my @watch = map { $_->[0] } grep { grep { $_ eq $metric } promql_names($_->[1]) } alerts();
    ok(@watch, "[$jail] (mode=$mode_of{$jail}) bans on $metric; an alert watches it: @watch");
}

# the metrics: what a real scrape of the module serves (and Prometheus' up)

my %served = map { $_ => 1 } names(served_scrape()), 'up';

ok($served{pow_shield_redis_round_trip_seconds_bucket}, 'premise: the scrape has the histogram\'s _bucket series');
for (@alerts) {
    my ($name, $expr) = @$_;
    my @used = promql_names($expr);
    ok(@used, "$name reads a metric");
    is_deeply([grep { !$served{$_} } @used], [], "$name: every metric it reads is served (@used)");
}

Test::PowShield->done_testing;
