package Test::PowShield::ConfigCases;

# Negative and positive `nginx -t` cases for directive values (docs/directives.md:
# a bad value fails naming the directive, the value, file and line).
#
#   my $cases = Test::PowShield::ConfigCases->new($t, $template);
#   $cases->bad(location => 'pow_shield_limit 0 1m;', '0', 'limit of 0');
#   $cases->good(http => 'pow_shield_zone 1m;', 'zone 1m');
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

1;
