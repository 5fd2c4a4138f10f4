package Test::PowShield::Metrics;

# Reading pow_shield_status scrapes in tests (docs/metrics.md).
#
#   use Test::PowShield::Metrics qw(scrape metric);
#   my $m = scrape($t, '/metrics');             # { 'name{labels}' => value }
#   metric($m, 'pow_shield_requests_total', result => 'pass');
#   total($m, 'pow_shield_redis_errors_total');  # every label summed
#   my ($rc, $out) = promtool_check($text);      # promtool check metrics
#   my @names = names($m);                       # the metric names served
#   my @used = promql_names($expr);              # the metric names a query reads
#   my $m = served_scrape();                     # what the module exports

use strict;
use warnings;

use Exporter qw(import);
use File::Temp qw(tempfile);

our @EXPORT_OK = qw(scrape parse metric total delta promtool promtool_check names promql_names
    served_scrape);

# The samples of a text exposition: { 'name{labels}' => number }; the
# response and the text are kept under the keys -response and -text.
sub parse {
    my ($text) = @_;
    my %m;
    for my $line (split /\n/, $text // '') {
        next if $line =~ /^#/ || $line !~ /\S/;
        my ($key, $value) = $line =~ /^(\S+)\s+(\S+)$/ or next;
        $m{$key} = $value + 0;
    }
    return \%m;
}

# GET the status location; dies unless it answers 200.
sub scrape {
    my ($t, $uri, %o) = @_;
    my $r = $t->http_get($uri // '/metrics', %o);
    die "scrape $uri: " . ($r->status // 'no answer') . "\n"
        unless ($r->status // 0) == 200;
    my $m = parse($r->body);
    $m->{-response} = $r;
    $m->{-text} = $r->body;
    return $m;
}

# A scrape of the module as it serves its status location (beside a
# shielded location, and one with named limits: the limit label), from an nginx started and stopped here: the names,
# labels and values it exports.
sub served_scrape {
    require Test::PowShield;
    my $t = Test::PowShield->new;
    $t->write_file_expand('nginx.conf', Test::PowShield::http_conf(<<'EOF'));
    pow_shield_secret "served-scrape-secret-0123456789abcdef";

    server {
        %%TEST_SERVER%%

        location / {
            pow_shield_limit 10 1m;
        }

        location /named/ {
            pow_shield_limit 10 1s name=burst;
            pow_shield_limit 1000 1h name=hourly;
        }

        location = /metrics {
            pow_shield_status;
        }
    }
EOF
    $t->run;
    my $m = scrape($t, '/metrics');
    $t->stop;
    return $m;
}

# metric($m, $name, label => value...): the sample's value (labels in the
# order the module prints them), undef if absent.
sub metric {
    my ($m, $name, @labels) = @_;
    my @pairs;
    while (my ($k, $v) = splice @labels, 0, 2) {
        push @pairs, qq($k="$v");
    }
    my $key = @pairs ? "$name\{" . join(',', @pairs) . '}' : $name;
    return $m->{$key};
}

# total($m, $name): the sum of a metric's samples, whatever their labels.
sub total {
    my ($m, $name) = @_;
    my $n = 0;
    $n += $m->{$_} for grep { /^\Q$name\E(?:\{|$)/ } keys %$m;
    return $n;
}

# delta($before, $after, $name, labels...): how much a sample grew.
sub delta {
    my ($before, $after, @what) = @_;
    return (metric($after, @what) // 0) - (metric($before, @what) // 0);
}

# The metric names of a scrape's samples, sorted: what a query can select
# (a histogram as its _bucket, _sum and _count series).
sub names {
    my ($m) = @_;
    my %n;
    for (keys %$m) {
        next if /^-/;
        (my $name = $_) =~ s/\{.*//s;
        $n{$name} = 1;
    }
    return sort keys %n;
}

# The metric names a PromQL expression selects, in order: every identifier
# that is not a function or aggregation (followed by "("), a keyword, a
# label (in {...}, by/without/on/ignoring/group_left/group_right (...)), a
# string, a duration or a Grafana variable ($instance, $__rate_interval).
sub promql_names {
    my ($expr) = @_;
    local $_ = $expr;
    s/"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`/ /g;    # strings
    s/\$\{[^}]*\}|\$\w+/ /g;                                # Grafana variables
    s/\{[^{}]*\}/ /g;                                          # label matchers
    s/\[[^\]]*\]/ /g;                                          # ranges, subqueries
    s/\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)/ /g;
    my %keyword = map { $_ => 1 }
        qw(and or unless bool offset by without on ignoring group_left group_right);
    my @names;
    while (/(?<![\w.:])([a-zA-Z_:][\w:]*)(\s*\()?/g) {
        my ($id, $call) = ($1, $2);
        next if $call || $keyword{$id} || $id =~ /^(?:inf|nan)$/i;
        push @names, $id;
    }
    return @names;
}

sub promtool { $ENV{TEST_PROMTOOL} || 'promtool' }

# promtool check metrics on a text: (exit code, output); (undef, why) when
# promtool is missing.
sub promtool_check {
    my ($text) = @_;
    my $bin = promtool();
    return (undef, "$bin not found") unless grep { -x "$_/$bin" }
        split /:/, $ENV{PATH} // '' or -x $bin;
    my ($fh, $file) = tempfile(UNLINK => 1);
    print $fh $text;
    close $fh;
    my $out = `'$bin' check metrics < '$file' 2>&1`;
    return ($? >> 8, $out);
}

1;
