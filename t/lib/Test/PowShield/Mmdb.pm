package Test::PowShield::Mmdb;

# A MaxMind DB (.mmdb, format 2.0) ASN database made from an iptoasn TSV
# table, for the GeoIP2 module's test (pow_shield_as_geoip2.t): the same
# networks and ASes as the geo include pow-shield asn-geo makes of it,
# under GeoLite2-ASN's field names (autonomous_system_number,
# autonomous_system_organization). Only what the test needs: an IPv6 tree
# (IPv4 networks under ::/96, where readers look IPv4 addresses up),
# 32-bit records, networks given as CIDRs.
#
#   use Test::PowShield::Mmdb qw(asn_mmdb);
#   my $bytes = asn_mmdb(['192.0.2.0/24', 64496, 'EXAMPLE'], ...);

use strict;
use warnings;

use Carp qw(croak);
use Exporter qw(import);
use Socket qw(inet_pton AF_INET AF_INET6);

our @EXPORT_OK = qw(asn_mmdb);

# Data section encoding (MaxMind DB spec, "Output Data Section").
sub _ctrl {
    my ($type, $size) = @_;
    croak "size $size" if $size >= 29 + 256;
    my ($low, $more) = $size < 29 ? ($size, '') : (29, chr($size - 29));
    return ($type <= 7 ? chr(($type << 5) | $low) : chr($low) . chr($type - 7)) . $more;
}
sub _str  { _ctrl(2, length $_[0]) . $_[0] }
sub _uint {
    my ($type, $n) = @_;
    my $b = '';
    while ($n) { $b = chr($n & 0xff) . $b; $n = int($n / 256) }
    return _ctrl($type, length $b) . $b;
}
sub _map {
    my (@pairs) = @_;
    my $out = _ctrl(7, @pairs / 2);
    while (my ($k, $v) = splice @pairs, 0, 2) { $out .= _str($k) . $v }
    return $out;
}

# The bits of a CIDR in the IPv6 tree.
sub _bits {
    my ($cidr) = @_;
    my ($addr, $len) = split m{/}, $cidr;
    my ($bytes, $pad) = $addr =~ /:/
        ? (inet_pton(AF_INET6, $addr), 0)
        : (inet_pton(AF_INET, $addr), 96);
    croak "bad network $cidr" unless defined $bytes && defined $len;
    return ('0' x $pad) . substr(unpack('B*', $bytes), 0, $len);
}

# asn_mmdb([cidr, asn, organization], ...) -> the database's bytes.
sub asn_mmdb {
    my (@nets) = @_;
    my ($data, %offset) = ('');
    my $root = [undef, undef];
    for my $n (@nets) {
        my ($cidr, $asn, $org) = @$n;
        $offset{"$asn $org"} //= do {
            my $at = length $data;
            $data .= _map(autonomous_system_number => _uint(6, $asn),
                autonomous_system_organization => _str($org));
            $at;
        };
        my @bits = split //, _bits($cidr);
        my $last = pop @bits;
        my $node = $root;
        $node = ($node->[$_] //= [undef, undef]) for @bits;
        $node->[$last] = \$offset{"$asn $org"};
    }
    # number the nodes breadth first, the root 0
    my @nodes = ($root);
    for (my $i = 0; $i < @nodes; $i++) {
        push @nodes, grep { ref eq 'ARRAY' } @{$nodes[$i]};
    }
    my %index = map { ($nodes[$_] => $_) } 0 .. $#nodes;
    my $count = @nodes;
    my $tree = '';
    for my $node (@nodes) {
        $tree .= pack 'N2', map {
            !defined $_ ? $count
            : ref eq 'ARRAY' ? $index{$_}
            : $count + 16 + $$_
        } @$node;
    }
    my $meta = _map(
        binary_format_major_version => _uint(5, 2),
        binary_format_minor_version => _uint(5, 0),
        build_epoch => _uint(9, time),
        database_type => _str('GeoLite2-ASN'),
        description => _map(en => _str('pow-shield test ASN database')),
        ip_version => _uint(5, 6),
        languages => _ctrl(11, 1) . _str('en'),
        node_count => _uint(6, $count),
        record_size => _uint(5, 32),
    );
    return $tree . ("\0" x 16) . $data . "\xAB\xCD\xEFMaxMind.com" . $meta;
}

1;
