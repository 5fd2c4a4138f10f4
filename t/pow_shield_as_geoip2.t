#!/usr/bin/perl

# The per-AS recipe's alternative (docs/operations.md, "Per autonomous
# system"): Debian's GeoIP2 module (libnginx-mod-http-geoip2) reading an
# ASN database, its geoip2 block as written in place of the recipe's geo
# block. Debian's module loads into Debian's nginx only, so this runs
# /usr/sbin/nginx with it and with the module built against Debian's nginx
# (objs/debian/, as pow_shield_debian.t); the database is made from
# t/fixtures/ip2asn-example.tsv, the networks pow-shield asn-geo gives
# (Test::PowShield::Mmdb). Then, as with the geo include:
#
# - nginx -t passes;
# - AS64496 past its limit is challenged from any of its addresses, IPv4
#   or IPv6, and $pow_shield_as is its number alone (64496);
# - a client of AS64497 passes;
# - an address the database does not know is left out of the AS limit only.
#
# Skipped without Debian's nginx, its GeoIP2 module or objs/debian/.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Test::PowShield qw(:util http_conf);
use Test::PowShield::Mmdb qw(asn_mmdb);

###############################################################################

my $REPO = $Test::PowShield::REPO;
my $nginx = $ENV{TEST_NGINX_DEBIAN_BINARY} || '/usr/sbin/nginx';
my $module = $ENV{TEST_NGINX_DEBIAN_MODULE}
    || "$REPO/objs/debian/ngx_http_pow_shield_module.so";
my $geoip2 = $ENV{TEST_NGINX_GEOIP2_MODULE}
    || '/usr/lib/nginx/modules/ngx_http_geoip2_module.so';
my $cli = $ENV{TEST_POW_SHIELD_CLI} // "$REPO/objs/pow-shield";

plan skip_all => "Debian nginx $nginx not installed" unless -x $nginx;
plan skip_all => "no $geoip2 (apt install libnginx-mod-http-geoip2)" unless -f $geoip2;
plan skip_all => "$module not built (make test builds it)" unless -f $module;
plan skip_all => "no $cli (make build)" unless -x $cli;

open my $fh, '<', "$REPO/docs/operations.md" or die "docs/operations.md: $!";
my $ops = do { local $/; <$fh> };
my ($section) = $ops =~ /^### Per autonomous system\n(.*?)^#{2,3} /ms
    or die "docs/operations.md: \"Per autonomous system\" not found\n";
my ($recipe) = $section =~ /```nginx\n(# Per autonomous system:.*?)```/s
    or die "the recipe's nginx block not found\n";
my ($block) = $section =~ /<!-- not-config -->\n```nginx\n(geoip2 .*?)```/s
    or die "the geoip2 block (after <!-- not-config -->) not found\n";
my ($db) = $block =~ /^geoip2 (\S+) \{/ or die "the geoip2 block names no database\n";

my $t = Test::PowShield->new(binary => $nginx, module => $module);
my $d = $t->testdir;

# The database: the networks asn-geo makes of the fixture.
my $geo = `'$cli' asn-geo '$REPO/t/fixtures/ip2asn-example.tsv'`;
is($?, 0, 'pow-shield asn-geo reads the fixture');
my @nets = map { [$_->[0], $_->[1], "EXAMPLE-AS$_->[1]"] }
    map { [/^(\S+) AS(\d+);$/] } grep { /^[^#]/ } split /\n/, $geo;
$t->write_file('GeoLite2-ASN.mmdb', asn_mmdb(@nets));

# The recipe with the geoip2 block in place of its geo block.
(my $http = $recipe) =~ s/^geo \$pow_shield_as \{.*?^\}\n/$block/ms
    or die "the recipe's geo block not found\n";
$http =~ s/\Q$db\E/$d\/GeoLite2-ASN.mmdb/;
$http =~ s/^\s*\.\.\.\s*\n//mg;
$http =~ s/^(server \{\n)/$1    %%TEST_SERVER%%\n        add_header X-AS \$pow_shield_as always;\n/m
    or die "the recipe has no server { }\n";
my ($limit) = $recipe =~ /pow_shield_limit (\d+) 1m name=as key=\$pow_shield_as;/
    or die "the recipe's AS limit not found\n";
my ($own) = $recipe =~ /pow_shield_limit (\d+) 1m;/
    or die "the recipe's per-address limit not found\n";

$t->write_file_expand('nginx.conf', http_conf(<<"EOF", main => "load_module $geoip2;"));
    pow_shield_secret "as-geoip2-suite-secret-0123456789abcdef";

    set_real_ip_from 127.0.0.1;
    real_ip_header X-Real-IP;

$http
EOF
$t->write_file('html/api/data.json', "{}\n");

my ($rc, $out) = $t->test_config;
is($rc, 0, "nginx -t: the geoip2 block as written, in Debian's nginx") or diag($out);
$t->run;

sub get {
    my ($ip) = @_;
    return $t->http_get('/api/data.json', 'X-Real-IP' => $ip);
}

is(get('192.0.2.1')->header('X-AS'), '64496', '$pow_shield_as is the AS number (IPv4)');
is(get('2001:db8:1::1')->header('X-AS'), '64496', '... and IPv6');
is(get('203.0.113.1')->header('X-AS') // '', '', '... empty for an unknown address');

my @as = ((map { "192.0.2.$_" } 2 .. 151), (map { sprintf '2001:db8:%x::1', $_ } 2 .. 151));
my %count;
$count{get($as[$_ % @as])->status // 'none'}++ for 0 .. $limit + 7;
is_deeply(\%count, { 200 => $limit - 2, 429 => 10 },
    "AS64496 is admitted up to its limit of $limit, then challenged");
is(get('192.0.2.254')->status, 429, '... from an address it never used');
is(get('2001:db8:ffff::1')->status, 429, '... IPv6 too');
my $r = get('198.51.100.7');
is($r->status, 200, 'a client of AS64497 passes');
is($r->header('X-AS'), '64497', '... counted under its own AS');

my @none = map { "203.0.113.$_" } 2 .. int($limit / $own) + 2;
my %none;
for my $ip (@none) {
    $none{get($ip)->status // 'none'}++ for 1 .. $own;
}
is_deeply(\%none, { 200 => $own * @none },
    'addresses the database does not know are left out of the AS limit');
is(get($none[0])->status, 429, '... and still limited per address');

###############################################################################

$t->done_testing;
