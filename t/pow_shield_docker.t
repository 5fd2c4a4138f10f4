#!/usr/bin/perl

# The Docker image's start (Dockerfile, docker/): the image ships no HMAC
# key; docker/entrypoint.sh writes a random key file at first start unless
# one is mounted, and the image's nginx.conf signs with that file. Docker
# itself is not needed: the script runs here with its key path in a
# temporary directory, and nginx checks the image's configuration.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Test::PowShield;

###############################################################################

my $t = Test::PowShield->new;
my $d = $t->testdir;
my $repo = $Test::PowShield::REPO;
my $entrypoint = "$repo/docker/entrypoint.sh";
my $secret = "$d/etc/pow-shield/secret";

# Runs the entrypoint with @cmd; returns (exit code, stderr and stdout).
sub entrypoint {
    my (@cmd) = @_;
    local $ENV{POW_SHIELD_SECRET_FILE} = $secret;
    my $pid = open my $fh, '-|';
    die "fork: $!" unless defined $pid;
    if ($pid == 0) {
        open STDERR, '>&', \*STDOUT;
        exec 'sh', $entrypoint, @cmd or POSIX::_exit(127);
    }
    local $/;
    my $out = <$fh> // '';
    close $fh;
    return ($? >> 8, $out);
}

sub mode { sprintf '%04o', (stat $_[0])[2] & 07777 }

###############################################################################

# first start: a key is made

my ($rc, $out) = entrypoint('echo', 'started');
is($rc, 0, 'first start: the entrypoint succeeds');
like($out, qr/generated a random one/, 'first start: says it made a key');
like($out, qr/^started$/m, 'first start: then runs the command');
ok(-f $secret, 'first start: the key file exists');
is(mode($secret), '0600', 'first start: the key file is 0600');
my $key = $t->read_file($secret);
like($key, qr/^[0-9a-f]{64}\n\z/, 'first start: one line of 64 hex digits (32 random bytes)');
is(scalar(my @tmp = glob("$d/etc/pow-shield/secret.new.*")), 0,
    'first start: no temporary file left');

# next start: the key is kept

($rc, $out) = entrypoint('true');
is($rc, 0, 'next start: the entrypoint succeeds');
like($out, qr/signing challenges with the key in \Q$secret\E/, 'next start: says it uses the file');
is($t->read_file($secret), $key, 'next start: the same key');

# a mounted key is used as it is

my $mounted = ('m' x 40) . "\n" . ('p' x 40) . "\n";
$t->write_file($secret, $mounted);
($rc, $out) = entrypoint('true');
is($rc, 0, 'mounted key: the entrypoint succeeds');
is($t->read_file($secret), $mounted, 'mounted key: left as it is');

# two containers never share a made key

unlink $secret;
entrypoint('true');
isnt($t->read_file($secret), $key, 'a new container: another key');

# the image's configuration, with the key path of this test, passes nginx -t

my $conf = $t->read_file("$repo/docker/nginx.conf");
unlike($conf, qr/pow_shield_secret\s/, 'image config: no pow_shield_secret (no fixed key)');
like($conf, qr{^\s*pow_shield_secret_file /etc/pow-shield/secret;}m,
    'image config: signs with /etc/pow-shield/secret');
$conf =~ s{/etc/pow-shield/secret}{$secret}g;
$t->write_file('nginx.conf', $conf);
$t->write_file('html/health.json', '{}');
mkdir "$d/logs";
symlink $t->module, "$d/ngx_http_pow_shield_module.so" or die "symlink: $!";

unlink $secret;
($rc, $out) = entrypoint($t->binary, '-t', '-p', "$d/", '-c', 'nginx.conf');
is($rc, 0, 'image config: nginx -t passes with the key the entrypoint made')
    or diag($out);
like($out, qr/syntax is ok/, 'image config: nginx says the syntax is ok');

# the Dockerfile puts no configuration with a fixed key into the image

my @copied = $t->read_file("$repo/Dockerfile") =~ /^COPY\s+(?!--from)(\S+)/mg;
is_deeply([grep { -f "$repo/$_" && $t->read_file("$repo/$_") =~ /pow_shield_secret\s/ } @copied],
    [], 'Dockerfile: copies no file that sets pow_shield_secret');
like($t->read_file("$repo/Dockerfile"), qr{^ENTRYPOINT \["/usr/local/bin/pow-shield-entrypoint"\]}m,
    'Dockerfile: starts through the entrypoint');

# the script passes shellcheck, where it is installed

SKIP: {
    skip 'shellcheck not installed', 1 unless `sh -c 'command -v shellcheck'`;
    my $lint = `shellcheck -s sh '$entrypoint' 2>&1`;
    is($?, 0, 'docker/entrypoint.sh passes shellcheck') or diag($lint);
}

###############################################################################

$t->done_testing;
