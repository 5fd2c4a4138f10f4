#!/usr/bin/perl

# The Grafana dashboard (nginx-conf/grafana/pow-shield.json) only asks for
# what the module serves: every query (each panel target's expr, and the
# template variables' label_values) names at least one metric, and every
# metric it names is one a real scrape of pow_shield_status serves
# (histograms as _bucket, _sum and _count); the labels its selectors and
# "by (...)" clauses use are labels of those metrics (or instance and job,
# which Prometheus adds), with values the scrape has. promtool checks that
# each query is valid PromQL (the Grafana variables replaced).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use File::Temp qw(tempdir);
use JSON::PP;
use Test::More;
use Test::PowShield;
use Test::PowShield::Metrics qw(served_scrape names promql_names);

###############################################################################

my $FILE = "$FindBin::Bin/../nginx-conf/grafana/pow-shield.json";

my $dashboard = do {
    open my $fh, '<', $FILE or die "$FILE: $!";
    local $/;
    decode_json(<$fh>);
};

# Every "expr" anywhere in the dashboard (panels, rows' panels, targets),
# with where it is; and the template variables' queries.
my @exprs;
sub walk {
    my ($node, $where) = @_;
    if (ref $node eq 'HASH') {
        my $here = defined $node->{title} ? "$where / $node->{title}" : $where;
        $here .= " [$node->{refId}]" if defined $node->{refId};
        push @exprs, [$here, $node->{expr}] if defined $node->{expr} && !ref $node->{expr};
        walk($node->{$_}, $here) for sort keys %$node;
    } elsif (ref $node eq 'ARRAY') {
        walk($_, $where) for @$node;
    }
}
walk($dashboard->{panels}, 'panel');

my @variables;
for my $v (@{$dashboard->{templating}{list} // []}) {
    next unless ($v->{type} // '') eq 'query';
    my $q = ref $v->{query} ? $v->{query}{query} : $v->{query};
    push @variables, ["variable \$$v->{name}", $q];
}

ok(@exprs >= 15, 'the dashboard has queries: ' . scalar @exprs);
ok(@variables, 'and template variables from queries: ' . scalar @variables);

# what a real scrape serves: names, and each name's labels and values

my $m = served_scrape();

my %served = map { $_ => 1 } names($m);
my %labels;    # name => label => value => 1
for my $key (grep { !/^-/ } keys %$m) {
    my ($name, $set) = $key =~ /^(\w+)(?:\{(.*)\})?$/ or next;
    $labels{$name} //= {};
    $labels{$name}{$1}{$2} = 1 while ($set // '') =~ /(\w+)="([^"]*)"/g;
}
ok($served{$_}, "premise: the scrape serves $_") for qw(
    pow_shield_requests_total pow_shield_redis_round_trip_seconds_bucket
    pow_shield_redis_round_trip_seconds_sum pow_shield_redis_round_trip_seconds_count);
my %added = (instance => 1, job => 1);    # by Prometheus

# the metrics each query names

for (@exprs) {
    my ($where, $expr) = @$_;
    my @used = promql_names($expr);
    ok(@used, "$where: names a metric");
    is_deeply([grep { !$served{$_} } @used], [], "$where: every metric is served (@used)");

    # selectors: label names, and exact or a|b|c values, the scrape has
    my @bad;
    while ($expr =~ /(\w+)\{([^}]*)\}/g) {
        my ($name, $matchers) = ($1, $2);
        while ($matchers =~ /(\w+)\s*(=~|!~|!=|=)\s*"([^"]*)"/g) {
            my ($label, $op, $value) = ($1, $2, $3);
            next if $added{$label};
            my $values = $labels{$name}{$label};
            if (!$values) {
                push @bad, "$name has no label $label";
                next;
            }
            next if $op ne '=' && $op ne '=~';
            next if $op eq '=~' && $value !~ /^\w+(?:\|\w+)*$/;
            push @bad, "$name\{$label=\"$_\"} is not served"
                for grep { !$values->{$_} } split /\|/, $value;
        }
    }
    # by (...): a label of a metric the query reads
    my %has = map { %{$labels{$_} // {}} } @used;
    while ($expr =~ /\bby\s*\(([^)]*)\)/g) {
        push @bad, "by ($_): no metric here has it"
            for grep { !$has{$_} && !$added{$_} } map { s/^\s+|\s+$//gr } split /,/, $1;
    }
    is_deeply(\@bad, [], "$where: its labels and values are the scrape's");
}

for (@variables) {
    my ($where, $query) = @$_;
    my ($name, $label) = ($query // '') =~ /^label_values\(\s*(\w+)\s*,\s*(\w+)\s*\)$/;
    ok($name && $served{$name}, "$where: label_values of a served metric ($query)");
    ok($label && ($added{$label} || $labels{$name // ''}{$label}), "$where: of one of its labels");
}

# the panels: ids unique, every query against the dashboard's data source

my (%ids, @no_ds);
sub panels { map { ($_, panels(@{$_->{panels} // []})) } @_ }
for my $p (panels(@{$dashboard->{panels}})) {
    $ids{$p->{id}}++;
    for my $target (@{$p->{targets} // []}) {
        push @no_ds, "$p->{title} [$target->{refId}]"
            unless (($target->{datasource} // $p->{datasource} // {})->{uid} // '') eq '${datasource}';
    }
}
is_deeply([grep { $ids{$_} > 1 } sort keys %ids], [], 'panel ids are unique');
is_deeply(\@no_ds, [], 'every query reads the ${datasource} variable');
my %titles = map { $_->{title} => 1 } panels(@{$dashboard->{panels}});
ok($titles{$_}, "a panel \"$_\"") for 'Requests by result and limit', 'Challenges: paid vs ignored',
    'Breaker trips and bans', 'Redis round trip', 'Fallback: Redis connections down', 'Zone use';

# valid PromQL: each query as a recording rule, through promtool check rules

SKIP: {
    skip 'promtool not installed (Debian: prometheus)', 1
        unless `sh -c 'command -v promtool'`;
    my $dir = tempdir(CLEANUP => 1);
    open my $fh, '>', "$dir/dashboard.rules.yml" or die $!;
    print $fh "groups:\n  - name: dashboard\n    rules:\n";
    my $n = 0;
    for (@exprs) {
        (my $expr = $_->[1]) =~ s/\$__rate_interval|\$__interval/5m/g;
        $expr =~ s/\$\{?instance\}?/.*/g;
        $n++;
        print $fh "      - record: dashboard:query$n\n        expr: '" . ($expr =~ s/'/''/gr) . "'\n";
    }
    close $fh;
    my $out = `promtool check rules '$dir/dashboard.rules.yml' 2>&1`;
    is($? >> 8, 0, "promtool: all $n queries are valid PromQL") or diag($out);
}

Test::PowShield->done_testing;
