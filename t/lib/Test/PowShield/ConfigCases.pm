package Test::PowShield::ConfigCases;

# Negative and positive `nginx -t` cases for directive values (docs/directives.md:
# a bad value fails naming the directive, the value, file and line).
#
#   my $cases = Test::PowShield::ConfigCases->new($t, $template);
#   $cases->bad(location => 'pow_shield_limit 0 1m;', '0', 'limit of 0');
#   $cases->good(http => 'pow_shield_zone 1m;', 'zone 1m');
#   $cases->warns(location => 'pow_shield_ban 1h after=3;', qr/never act/,
#       'ban, strikes off', HTTP => 'pow_shield_strikes off;');
#
# The template has lines reading just HTTP, SERVER and LOCATION where the
# directive under test (and any extra text per context) goes.

use strict;
use warnings;

use Test::More ();

sub new {
    my ($class, $t, $template) = @_;
    return bless { t => $t, template => $template, n => 0 }, $class;
}

# Writes a config with $directive in context $where (plus %extra text per
# context: HTTP => '...'); returns (file, line of the directive).
sub config {
    my ($self, $where, $directive, %extra) = @_;
    my %at = (HTTP => '', SERVER => '', LOCATION => '', %extra);
    $at{uc $where} .= "            $directive  # MARK\n" if defined $directive;
    (my $text = $self->{template}) =~ s/^(HTTP|SERVER|LOCATION)\n/$at{$1}/mg;
    my $file = 'case' . ++$self->{n} . '.conf';
    $self->{t}->write_file_expand($file, $text);
    my @lines = split /\n/, $self->{t}->read_file($file);
    my ($line) = grep { $lines[$_ - 1] =~ /# MARK/ } 1 .. @lines;
    return ($file, $line);
}

# nginx -t fails naming the directive, the value (when given) and file:line.
# Options: -noline => 1 (nginx's own message, no file:line),
# -hide => text that must not appear (a password),
# -says => a pattern the [emerg] line must match (the reason).
sub bad {
    my ($self, $where, $directive, $value, $name, %extra) = @_;
    my $noline = delete $extra{-noline};
    my $hide = delete $extra{-hide};
    my $says = delete $extra{-says};
    my ($file, $line) = $self->config($where, $directive, %extra);
    my ($rc, $out) = $self->{t}->test_config($file);
    my ($dname) = $directive =~ /^(\w+)/;
    my $ok = Test::More::isnt($rc, 0, "rejected: $name");
    $ok &&= Test::More::like($out, qr/\[emerg\].*\b\Q$dname\E\b/,
        "$name: names $dname");
    if (defined $value) {
        $ok &&= Test::More::like($out, qr/"\Q$value\E"/,
            "$name: names the value \"$value\"");
    }
    $ok &&= Test::More::like($out, qr/\Q$file\E:$line\b/,
        "$name: names $file:$line") unless $noline;
    if (defined $says) {
        $ok &&= Test::More::like($out, qr/\[emerg\].*$says/,
            "$name: says $says");
    }
    if (defined $hide) {
        $ok &&= Test::More::unlike($out, qr/\Q$hide\E/,
            "$name: does not show \"$hide\"");
    }
    Test::More::diag($out) unless $ok;
    return $ok;
}

# nginx -t passes.
sub good {
    my ($self, $where, $directive, $name, %extra) = @_;
    my ($file) = $self->config($where, $directive, %extra);
    my ($rc, $out) = $self->{t}->test_config($file);
    return Test::More::is($rc, 0, "accepted: $name") || Test::More::diag($out);
}

# nginx -t passes and warns once: a [warn] line matching $warning that ends
# with the file:line of the directive (its last line when it has several).
# Options: -at => a pattern for the other place the line names.
sub warns {
    my ($self, $where, $directive, $warning, $name, %extra) = @_;
    my $at = delete $extra{-at};
    my ($file, $line) = $self->config($where, $directive, %extra);
    my ($rc, $out) = $self->{t}->test_config($file);
    my @warn = grep { /\[warn\]/ } split /\n/, $out;
    my $ok = Test::More::is($rc, 0, "accepted: $name");
    $ok &&= Test::More::is(scalar @warn, 1, "$name: one warning");
    $ok &&= Test::More::like($warn[0] // '', qr/$warning.* in \S*\Q$file\E:$line$/,
        "$name: the warning names $file:$line");
    $ok &&= Test::More::like($warn[0] // '', $at, "$name: and $at") if defined $at;
    Test::More::diag($out) unless $ok;
    return $ok;
}

# nginx -t passes without a warning.
sub quiet {
    my ($self, $where, $directive, $name, %extra) = @_;
    my ($file) = $self->config($where, $directive, %extra);
    my ($rc, $out) = $self->{t}->test_config($file);
    my $ok = Test::More::is($rc, 0, "accepted: $name");
    $ok &&= Test::More::unlike($out, qr/\[warn\]/, "$name: no warning");
    Test::More::diag($out) unless $ok;
    return $ok;
}

1;
