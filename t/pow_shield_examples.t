#!/usr/bin/perl

# The configurations shipped for operators (nginx-conf/*.conf, full
# nginx.conf files, and nginx-conf/examples/*.conf, snippets for
# /etc/nginx/conf.d/ that nginx includes inside "http { }") all pass
# "nginx -t" with the module.  Paths an example takes from a real system
# (/etc/nginx/..., /var/log/nginx/..., /srv/...) are moved into the test
# directory, and the key file it names is made there; nothing else of the
# example is changed.  A TLS file an example names (tls_ca=, tls_cert=,
# tls_key=) is made there with the openssl command: a real PEM, since
# "nginx -t" loads it.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use File::Basename qw(basename);
use Test::More;
use Test::PowShield;
use Test::PowShield::Examples qw(slurp relocate make_tls_files);

###############################################################################

my $repo = $Test::PowShield::REPO;
my @full = sort glob("$repo/nginx-conf/*.conf");
my @snippets = sort glob("$repo/nginx-conf/examples/*.conf");

# The deployments the examples are there to show (docs/operations.md).
my %shows = (
    'realip from a load balancer'
        => qr/^\s*set_real_ip_from\b.*^\s*proxy_pass\b/ms,
    'an allow-list by geo and map'
        => qr/^\s*geo\b.*^\s*map\b.*^\s*pow_shield_key\b/ms,
    'cluster mode, fail closed with trusted API keys'
        => qr/^\s*pow_shield_redis\s+redis:.*^\s*pow_shield_fail\s+closed\s+trusted=\$api_key_valid;/ms,
    'a trap, and the status endpoint behind allow/deny'
        => qr/\{\s*pow_shield_trap;.*^\s*pow_shield_status;\s*\n(?:\s*allow\s[^;]+;[^\n]*\n)+\s*deny\s+all;/ms,
    'a JSON access log with the variables'
        => qr/^\s*log_format\s+\S+\s+escape=json\b.*\$pow_shield_result/ms,
    'a Redis Cluster over TLS, verified against a CA file'
        => qr/^\s*pow_shield_redis\s+rediss:[^;]*,rediss:[^;]*\bcluster\b[^;]*\btls_ca=/ms,
);
for my $what (sort keys %shows) {
    ok((grep { slurp($_) =~ $shows{$what} } @snippets), "an example shows $what");
}

my $t;

for my $path (@snippets) {
    my $name = basename($path);
    $t = Test::PowShield->new;
    my $d = $t->testdir;
    my $conf = slurp($path);

    like($conf, qr/\A#/, "$name: starts with a comment saying what it is for");
    unlike($conf, qr/^\s*pow_shield_secret\s/m, "$name: no key written in the configuration");
    # A snippet for conf.d/ loads no module itself; where it tells the
    # operator to, it says that the Debian package already does (a second
    # load_module of the module is an error).
    unlike($conf, qr/^\s*load_module\b/m, "$name: no load_module line of its own");
    like($conf, qr{Debian package does it already\s*\n#\s*\(/etc/nginx/modules-enabled/\)},
        "$name: says the Debian package already loads the module")
        if $conf =~ /^#.*\bload_module\b/m;
    # The zone holds about 4,000 entries per MB (docs/operations.md,
    # "Sizing the zone").
    while ($conf =~ /^#.*?(\d+) MB holds about ([\d,]+)/mg) {
        my ($mb, $n) = ($1, $2 =~ tr/,//dr);
        ok(abs($n - 4000 * $mb) <= 400 * $mb, "$name: $mb MB holds about $2 entries (4,000 per MB)");
    }

    # A key file like the one the examples tell the operator to make.
    $t->write_file('etc/nginx/pow_shield.key', ('5a' x 32) . "\n");
    my $relocated = relocate($conf, $d);
    make_tls_files($relocated, $d);
    $t->write_file('etc/nginx/conf.d/example.conf', $relocated);
    mkdir "$d/logs";
    $t->write_file_expand('nginx.conf', <<"EOF");
%%TEST_GLOBALS%%

events {
}

http {
    %%TEST_GLOBALS_HTTP%%

    include $d/etc/nginx/conf.d/example.conf;
}
EOF
    my ($rc, $out) = $t->test_config;
    is($rc, 0, "$name: nginx -t passes") or diag($out);
}

for my $path (@full) {
    my $name = basename($path);
    $t = Test::PowShield->new;
    my $d = $t->testdir;
    my $conf = relocate(slurp($path), $d);
    my $module = $t->module;
    ok($conf =~ s{^(\s*)load_module\s+\S*ngx_http_pow_shield_module\.so;}{$1load_module $module;}m,
        "$name: loads the module");
    mkdir "$d/logs";
    $t->write_file('nginx.conf', $conf);
    my ($rc, $out) = $t->test_config;
    is($rc, 0, "$name: nginx -t passes") or diag($out);
}

###############################################################################

$t->done_testing;
