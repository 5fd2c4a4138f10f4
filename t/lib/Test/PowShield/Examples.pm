package Test::PowShield::Examples;

# What the tests of shipped configuration need to load it in a test
# directory: t/pow_shield_examples.t (nginx-conf/) and
# t/pow_shield_doc_snippets.t (the snippets of README.md and docs/*.md).
#
#   slurp($path)                    the file's text
#   relocate($conf, $dir)           a real system's paths moved under $dir
#   make_tls_files($conf, $dir)     the PEM files its tls_* options name
#   readme_blocks($path, $heading)  a Markdown file's ```python examples
#                                   under one heading

use strict;
use warnings;

use Exporter qw(import);
use File::Basename qw(dirname);
use File::Path qw(make_path);

our @EXPORT_OK = qw(slurp relocate make_tls_files readme_blocks);

sub slurp {
    my ($path) = @_;
    open my $fh, '<', $path or die "$path: $!";
    local $/;
    return scalar <$fh>;
}

# A real system's paths, moved into the test directory $d.
sub relocate {
    my ($conf, $d) = @_;
    $conf =~ s{(?<![\w/])/etc/nginx/}{$d/etc/nginx/}g;
    $conf =~ s{(?<![\w/])/var/log/nginx/}{$d/logs/}g;
    $conf =~ s{(?<![\w/])/srv/}{$d/srv/}g;
    return $conf;
}

# The TLS files named in a relocated configuration, made under $d with the
# openssl command (real PEM files, since "nginx -t" loads them): a
# self-signed CA certificate at each tls_ca=, and one certificate with its
# key at tls_cert= and tls_key=.
sub make_tls_files {
    my ($conf, $d) = @_;
    my %want;
    while ($conf =~ /\b(tls_ca|tls_cert|tls_key)=([^\s;]+)/g) {
        $want{$1}{$2} = 1;
    }
    my $openssl = sub {
        my ($args) = @_;
        system("openssl $args >>$d/openssl.log 2>&1") == 0
            or die "openssl $args failed; see $d/openssl.log";
    };
    my $req = 'req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2';
    for my $ca (sort keys %{ $want{tls_ca} || {} }) {
        make_path(dirname($ca));
        $openssl->("$req -subj /CN=example-ca -keyout $ca.key -out $ca");
    }
    my @certs = sort keys %{ $want{tls_cert} || {} };
    my @keys = sort keys %{ $want{tls_key} || {} };
    for my $i (0 .. $#certs) {
        my $key = $keys[$i] // "$certs[$i].key";
        make_path(dirname($certs[$i]), dirname($key));
        $openssl->("$req -subj /CN=example-client -keyout $key -out $certs[$i]");
    }
}

# The fenced ```python blocks of the Markdown file $path under the heading
# $from (up to the next heading of its level or above), each as
# [text, line of its fence].
sub readme_blocks {
    my ($path, $from) = @_;
    open my $fh, '<', $path or die "$path: $!";
    my (@out, $in, $take, $level);
    while (my $line = <$fh>) {
        if (!defined $in && $line =~ /^(#+) /) {
            my $l = length $1;
            if ($line =~ /^#+ \Q$from\E\s*$/) { ($take, $level) = (1, $l); next }
            $take = 0 if $take && $l <= $level;
        }
        next unless $take;
        if (!defined $in && $line =~ /^```python\s*$/) { $in = ['', $.]; next }
        if (defined $in && $line =~ /^```\s*$/) { push @out, $in; undef $in; next }
        $in->[0] .= $line if defined $in;
    }
    return @out;
}

1;
