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

use POSIX ();
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

# the image runs nginx as an unprivileged user: the Dockerfile switches to
# it, and it owns exactly what nginx and the entrypoint write

my $dockerfile = $t->read_file("$repo/Dockerfile");
my ($runtime) = $dockerfile =~ /^FROM\s+\S+\s+AS\s+runtime\s*\n(.*)\z/msi;
ok(defined $runtime && $dockerfile =~ /\A(?:.*\n)?FROM[^\n]*AS runtime\b(?!.*^FROM\b)/ms,
    'Dockerfile: the runtime image is the last stage (what `docker build .` makes)');
my @users = ($runtime // '') =~ /^USER\s+(\S+)/mg;
ok(@users && $users[-1] =~ /^(\d+)(?::(\d+))?$/ && $1 != 0 && ($2 // 1) != 0,
    'Dockerfile: the runtime runs as a numeric non-root uid and gid')
    or diag("USER lines: @users");
like($runtime // '', qr{chown\s+\S+\s+/opt/pow-shield/logs\s+/etc/pow-shield\b},
    'Dockerfile: the user owns the log directory and the key directory');
my ($exposed) = ($runtime // '') =~ /^EXPOSE\s+(\d+)/m;
my ($listen) = $t->read_file("$repo/docker/nginx.conf") =~ /^\s*listen\s+(\d+)\s*;/m;
ok(defined $listen && $listen >= 1024, 'image config: listens on an unprivileged port');
is($exposed, $listen, 'Dockerfile: exposes the port nginx listens on');
like($t->read_file("$repo/docker/nginx.conf"), qr{^pid\s+logs/}m,
    'image config: the pid file is in logs/, which the user owns');
like($dockerfile, qr/^FROM\s+build\s+AS\s+test\s*\nRUN\s+make\s+test\s*$/m,
    'Dockerfile: a test stage on the build image runs make test');

SKIP: {
    skip 'not root: the checks above already ran unprivileged', 5 unless $> == 0;

    # The image's layout, root-owned but for logs/ and the key directory.
    my ($uid, $gid) = (getpwnam('nobody'))[2, 3];
    my $img = "$d/image";
    my $prefix = "$img/opt/pow-shield";
    my $keydir = "$img/etc/pow-shield";
    mkdir $_ for $img, "$img/opt", $prefix, "$img/etc", "$prefix/html";
    mkdir "$prefix/logs";
    mkdir $keydir, 0700;
    chown $uid, $gid, "$prefix/logs", $keydir;
    chmod 0700, $keydir;
    system('cp', $t->binary, "$img/nginx") == 0 or die "cp nginx";
    system('cp', $t->module, "$prefix/ngx_http_pow_shield_module.so") == 0 or die "cp module";
    my $conf = $t->read_file("$repo/docker/nginx.conf");
    $conf =~ s{/etc/pow-shield/secret}{$keydir/secret}g;
    $t->write_file("$prefix/nginx.conf", $conf);
    chmod 0755, $img, "$img/opt", $prefix, "$img/etc", "$prefix/html";

    my $pid = open my $fh, '-|';
    die "fork: $!" unless defined $pid;
    if ($pid == 0) {
        open STDERR, '>&', \*STDOUT;
        $) = "$gid $gid";
        POSIX::setgid($gid) or POSIX::_exit(126);
        POSIX::setuid($uid) or POSIX::_exit(126);
        POSIX::_exit(126) if $> == 0 || $< == 0;
        $ENV{POW_SHIELD_SECRET_FILE} = "$keydir/secret";
        # Docker hands the container's user its own stdout (the image config
        # logs to /dev/stdout): a pipe made here, as that user, is the same.
        exec 'sh', '-c', '{ "$@"; echo "exit status $?"; } 2>&1 | cat', 'sh',
            'sh', $entrypoint, "$img/nginx", '-t', '-p', "$prefix/", '-c', 'nginx.conf'
            or POSIX::_exit(127);
    }
    my $out = do { local $/; <$fh> } // '';
    close $fh;
    like($out, qr/^exit status 0$/m, 'unprivileged: the entrypoint and nginx -t succeed')
        or diag($out);
    like($out, qr/generated a random one/, 'unprivileged: the entrypoint made the key');
    is((stat "$keydir/secret")[4], $uid, 'unprivileged: the key belongs to the user');
    is(mode("$keydir/secret"), '0600', 'unprivileged: the key is 0600');
    like($out, qr/test is successful/, 'unprivileged: nginx -t passes on the image config');
}

# the script passes shellcheck, where it is installed

SKIP: {
    skip 'shellcheck not installed', 1 unless `sh -c 'command -v shellcheck'`;
    my $lint = `shellcheck -s sh '$entrypoint' 2>&1`;
    is($?, 0, 'docker/entrypoint.sh passes shellcheck') or diag($lint);
}

###############################################################################

$t->done_testing;
