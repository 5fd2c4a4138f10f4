package Test::PowShield::Certs;

# Certificates for one test, made with the openssl command in its
# directory (EC keys: quick to make):
#
#   use Test::PowShield::Certs qw(openssl_available make_ca make_cert);
#   plan(skip_all => 'openssl command not found') unless openssl_available();
#   make_ca($dir, 'ca');                          # $dir/ca.pem, $dir/ca.key
#   make_cert($dir, 'ca', 'server', 'IP:127.0.0.1,DNS:redis.test');
#                                                 # $dir/server.pem, .key
#
# What openssl prints goes to $dir/openssl.log; a failure dies naming it.

use strict;
use warnings;

use Carp qw(croak);
use Exporter qw(import);

our @EXPORT_OK = qw(openssl_available make_ca make_cert);

sub openssl_available { `openssl version 2>/dev/null` ? 1 : 0 }

sub _openssl {
    my ($dir, @args) = @_;
    my $cmd = join ' ', 'openssl', @args;
    system("$cmd >>$dir/openssl.log 2>&1") == 0
        or croak "$cmd failed; see $dir/openssl.log";
}

# A self-signed CA named $ca.
sub make_ca {
    my ($dir, $ca) = @_;
    _openssl($dir, "req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes",
        "-keyout $dir/$ca.key -out $dir/$ca.pem -days 2 -subj /CN=$ca");
}

# A certificate $name that $ca signs, with subjectAltName $san.
sub make_cert {
    my ($dir, $ca, $name, $san) = @_;
    _openssl($dir, "req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes",
        "-keyout $dir/$name.key -out $dir/$name.csr -subj /CN=$name");
    open my $ext, '>', "$dir/$name.ext" or croak "$dir/$name.ext: $!";
    print $ext "subjectAltName=$san\n";
    close $ext;
    _openssl($dir, "x509 -req -in $dir/$name.csr -CA $dir/$ca.pem -CAkey $dir/$ca.key",
        "-CAcreateserial -days 2 -out $dir/$name.pem -extfile $dir/$name.ext");
}

1;
