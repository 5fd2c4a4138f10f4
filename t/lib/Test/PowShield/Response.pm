package Test::PowShield::Response;

# A parsed HTTP/1.x response: status, case-insensitive headers that keep
# repeated fields, body (de-chunked), JSON body.

use strict;
use warnings;

use JSON::PP ();

# new($raw, $error): $error describes a transport failure (timeout...).
sub new {
    my ($class, $raw, $error) = @_;
    my $self = bless { raw => $raw // '', error => $error, status => undef,
        reason => undef, headers => {}, order => [], body => undef }, $class;

    my ($head, $body) = split /\r?\n\r?\n/, $self->{raw}, 2;
    return $self unless defined $head && $head =~ m{^HTTP/\d\.\d (\d{3})(?: ([^\r\n]*))?};
    @$self{qw(status reason)} = ($1, $2 // '');

    my @lines = split /\r?\n/, $head;
    shift @lines;
    for (@lines) {
        my ($name, $value) = /^([^:]+):\s*(.*?)\s*$/ or next;
        push @{$self->{headers}{lc $name}}, $value;
        push @{$self->{order}}, [$name, $value];
    }

    $body //= '';
    if (($self->header('Transfer-Encoding') // '') =~ /\bchunked\b/i) {
        $body = _dechunk($body);
    }
    $self->{body} = $body;
    return $self;
}

sub _dechunk {
    my ($in) = @_;
    my $out = '';
    while ($in =~ s/^([0-9a-fA-F]+)[^\r\n]*\r\n//) {
        my $n = hex $1;
        last if $n == 0;
        $out .= substr($in, 0, $n);
        substr($in, 0, $n + 2, '');
    }
    return $out;
}

# Split a keep-alive stream into responses (Content-Length or chunked
# framing; no body for HEAD, 1xx, 204 and 304).
sub split_stream {
    my ($class, $raw, %o) = @_;
    my @out;
    while (length $raw) {
        my $end = index($raw, "\r\n\r\n");
        last if $end < 0;
        my $head = substr($raw, 0, $end + 4);
        my $rest = substr($raw, $end + 4);
        my ($status) = $head =~ m{^HTTP/\d\.\d (\d{3})};
        my $len;
        if ($o{head} || !defined $status || $status =~ /^(?:1..|204|304)$/) {
            $len = 0;
        } elsif ($head =~ /^Transfer-Encoding:\s*chunked/mi) {
            my $pos = 0;
            while ($rest =~ /\G([0-9a-fA-F]+)[^\r\n]*\r\n/gc) {
                my $n = hex $1;
                $pos = pos($rest) + $n + 2;
                pos($rest) = $pos;
                last if $n == 0;
            }
            $len = $pos;
        } elsif ($head =~ /^Content-Length:\s*(\d+)/mi) {
            $len = $1;
        } else {
            $len = length $rest;
        }
        push @out, $class->new($head . substr($rest, 0, $len));
        $raw = substr($rest, $len);
    }
    return @out;
}

sub raw    { $_[0]{raw} }
sub error  { $_[0]{error} }
sub status { $_[0]{status} }
sub reason { $_[0]{reason} }
sub body   { $_[0]{body} }

# Always a scalar (safe inside is()): undef when absent, repeated fields
# joined with ", " (so a duplicated header shows up in comparisons).
sub header {
    my ($self, $name) = @_;
    my $v = $self->{headers}{lc $name} or return undef;
    return join ', ', @$v;
}

# Every value of a header, in order.
sub header_values {
    my ($self, $name) = @_;
    return @{$self->{headers}{lc $name} || []};
}

sub has_header { exists $_[0]{headers}{lc $_[1]} }

# Names of all headers, lower-cased, in order of appearance.
sub header_names {
    my ($self) = @_;
    my %seen;
    return grep { !$seen{$_}++ } map { lc $_->[0] } @{$self->{order}};
}

# Decoded JSON body (hashref/arrayref) or undef.
sub json {
    my ($self) = @_;
    return undef unless defined $self->{body};
    return $self->{json} //= eval { JSON::PP->new->decode($self->{body}) };
}

# For diagnostics: status line and headers.
sub head_text {
    my ($self) = @_;
    my ($head) = split /\r?\n\r?\n/, $self->{raw}, 2;
    return $head // ($self->{error} // '(no response)');
}

1;
