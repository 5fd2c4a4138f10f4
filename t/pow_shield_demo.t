#!/usr/bin/perl

# `make run PORT=<port>` serves the demo where asked, and the README's
# first commands (the curl loop, `pow-shield get -v`) do what the README
# says against it: five 200s, a 429, then a paid 200.
#
# make run builds first (a no-op once `make build` ran), then runs
# objs/nginx in the foreground from objs/demo; the test starts it in a
# process group of its own and stops that group at the end. Skipped while
# another demo runs from this tree (objs/demo/logs/nginx.pid names a live
# process): both would use objs/demo.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use IO::Socket::INET;
use POSIX qw(WNOHANG);
use Test::More;
use Test::PowShield qw(:util);
use Test::PowShield::Examples qw(slurp);

###############################################################################

my $t = Test::PowShield->new;   # skip_all without objs/nginx and the module
my $repo = $Test::PowShield::REPO;

plan(skip_all => 'curl not installed') unless `sh -c 'command -v curl'`;
if (open my $fh, '<', "$repo/objs/demo/logs/nginx.pid") {
    my ($pid) = <$fh> =~ /(\d+)/;
    plan(skip_all => "a demo runs from this tree (nginx $pid)") if $pid && kill 0, $pid;
}

my $port = $t->port(8080);
my $out = $t->testdir . '/make.out';

my $make = fork // die "fork: $!";
if ($make == 0) {
    setpgrp(0, 0);
    open STDIN, '<', '/dev/null';
    open STDOUT, '>', $out or POSIX::_exit(127);
    open STDERR, '>&', \*STDOUT;
    chdir $repo or POSIX::_exit(127);
    exec 'make', '--no-print-directory', 'run', "PORT=$port" or POSIX::_exit(127);
}
END {
    local $?;    # the test's own exit status
    if ($make) {
        kill 'TERM', -$make;
        waitpid($make, 0);
    }
}

# until it listens (or make gave up: a build error)
my $exited;
eventually(900, sub {
    $exited = 1 if waitpid($make, WNOHANG) == $make;
    $exited || IO::Socket::INET->new(PeerAddr => "127.0.0.1:$port", Timeout => 1);
});
ok(!$exited, "make run PORT=$port: nginx listens on 127.0.0.1:$port")
    or diag(slurp($out));
my $banner = slurp($out);
like($banner, qr{pow-shield demo on http://127\.0\.0\.1:\Q$port\E\b},
    'the banner names that port');
unlike($banner, qr/127\.0\.0\.1:8080/, '... and no other') if $port != 8080;

###############################################################################
# The README's first commands, at that port

my $readme = slurp("$repo/README.md");
my ($loop) = $readme =~ /^(for i in \$\(seq 6\); do curl .*; done)$/m;
my ($said) = $readme =~ /^\Q$loop\E\n# ([\d ]+)$/m if $loop;
ok($loop && $said, "README.md: the curl loop and what it prints ($said)");
(my $here = $loop // '') =~ s/127\.0\.0\.1:8080/127.0.0.1:$port/g;
open my $sh, '-|', 'bash', '-c', $here or die "bash: $!";
my $codes = do { local $/; <$sh> } // '';
close $sh;
is(join(' ', split ' ', $codes), $said, 'the curl loop prints what the README says');

my ($get) = $readme =~ m{^(objs/pow-shield get -v http://127\.0\.0\.1:8080/\S+)$}m;
ok($get, "README.md: $get");
($here = $get // '') =~ s/127\.0\.0\.1:8080/127.0.0.1:$port/g;
my $paid = `cd '$repo' && $here 2>&1`;
is($? >> 8, 0, '... pays and succeeds') or diag($paid);
like($paid, qr/HTTP 429: solving difficulty 4/, '... after solving the 429, as the README says');

$t->done_testing;
