#!/usr/bin/perl

# The shipped fail2ban filter fires on what the README's configuration logs,
# and the fail2ban-regex command the documentation gives works as written.
#
# The README's configuration (its "## Configuration" block, as an operator
# copies it: the default breaker, no pow_shield_ban) is run with only what
# a test needs changed: the key file and the upstream are made here, the
# server listens on a test port. A client that ignores its challenges
# opens the breaker, which logs "breaker opened: ... key=address". The
# fail2ban-regex line of docs/operations.md (and of the jail's comments)
# names /var/log/nginx/error.log and /etc/fail2ban/filter.d/pow-shield.conf,
# where the Debian package installs the filter (t/pow_shield_deb.t); as
# root it runs verbatim in a mount namespace where those two paths are the
# test's log and the shipped filter; otherwise with those two paths mapped
# to the same files.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use File::Copy qw(copy);
use File::Path qw(make_path);
use File::Temp qw(tempdir);
use Test::More;
use Test::PowShield qw(:util);
use Test::PowShield::Examples qw(slurp relocate);

###############################################################################

plan(skip_all => 'fail2ban not installed (Debian: fail2ban)')
    unless `sh -c 'command -v fail2ban-regex'`;

my $repo = $Test::PowShield::REPO;
my $FILTER = "$repo/nginx-conf/fail2ban/filter.d/pow-shield.conf";
my $LOG = '/var/log/nginx/error.log';
my $INSTALLED = '/etc/fail2ban/filter.d/pow-shield.conf';

# The README's configuration: the first ```nginx block of the section.
my ($section) = slurp("$repo/README.md") =~ /^## Configuration\n(.*?)^## /ms;
my ($readme) = ($section // '') =~ /^```nginx\n(.*?)^```/ms;
ok($readme && $readme =~ /^\s*load_module\b/m, "README.md's configuration found");
unlike($readme // '', qr/^\s*pow_shield_(?:ban|strikes|breaker_log_level)\s/m,
    '... it leaves the breaker at its defaults and sets no ban');

# The documented command: a line of a fenced block that is only it.
my @commands;
for my $file ("$repo/docs/operations.md", "$repo/nginx-conf/fail2ban/jail.d/pow-shield.conf") {
    push @commands, slurp($file) =~ /^[#\s]*(fail2ban-regex\s+\S+\s+\S+)\s*$/mg;
}
ok(scalar @commands >= 2, 'docs/operations.md and the jail give the fail2ban-regex command');
my %forms = map { $_ => 1 } @commands;
is(join("\n", sort keys %forms), "fail2ban-regex $LOG $INSTALLED",
    'one command: the nginx error log and the absolute path of the installed filter');

###############################################################################

my $t = Test::PowShield->new;
my $d = $t->testdir;
my $conf = relocate($readme, $d);
for my $file ($conf =~ /^\s*pow_shield_secret_file\s+(\S+?);/mg) {
    $t->write_file($file, ('5a' x 32) . "\n");
}
$conf =~ s{^[ \t]*load_module\s+\S*ngx_http_pow_shield_module\.so;[^\n]*\n}{%%TEST_GLOBALS%%\n}m
    or die "README.md's configuration has no load_module line\n";
$conf .= "\nevents {\n}\n" unless $conf =~ /^\s*events\s*\{/m;
# the backend its proxy_pass names: a server of the test serving files
# (an upstream by name, or an address and port)
my @named = grep { !/^\d+\.\d+\.\d+\.\d+$/ } $conf =~ m{^\s*proxy_pass\s+http://([\w.-]+)[;/]}mg;
$conf =~ s{^(\s*proxy_pass\s+http://)\d+\.\d+\.\d+\.\d+:\d+}{${1}127.0.0.1:%%PORT_8081%%}mg;
my $upstreams = join '', map { "    upstream $_ {\n        server 127.0.0.1:%%PORT_8081%%;\n    }\n" } @named;
$conf =~ s{^([ \t]*http\s*\{[^\n]*\n)}{$1    %%TEST_GLOBALS_HTTP%%
$upstreams    server {
        listen 127.0.0.1:%%PORT_8081%%;
        root $d/html;
    }
}m or die "no http block\n";
$conf =~ s{^([ \t]*server\s*\{[^\n]*\n)(?![ \t]*listen)}{$1        listen 127.0.0.1:%%PORT_8080%%;\n}m;
$t->write_file_expand('nginx.conf', $conf);
$t->write_file('html/api/items.json', qq({"items":[]}\n));
$t->run;

# 127.0.0.1 is counted by its address (the default key).
my $limit = ($readme =~ /pow_shield_limit\s+(\d+)\s/)[0];
my @r = map { $t->http_get('/api/items.json') } 1 .. $limit + 6;
is(statuses(@r), join(' ', ('200') x $limit, ('429') x 5, '403'),
    "$limit requests pass, 5 unpaid 429s open the breaker (default 5 strikes), then 403");

my @opened = $t->error_log_lines(qr/pow_shield: breaker opened:/);
like($opened[0] // '', qr/\[error\] .*pow_shield: breaker opened: client=127\.0\.0\.1 key=address strikes=5 for=60s/,
    'the breaker line: client=127.0.0.1 key=address, at [error]');
is(scalar @opened, 1, '... one line for the one opening');
is(scalar $t->error_log_lines(qr/pow_shield: client banned:/), 0, 'no ban line: no pow_shield_ban');

###############################################################################
# fail2ban-regex, as documented

my $log = "$d/error.log";
my $command = (sort keys %forms)[0] // "fail2ban-regex $LOG $INSTALLED";
(my $ips = $command) =~ s/^fail2ban-regex /fail2ban-regex -o ip /;

# $run->($cmd): what the command prints where $LOG is the test's log and
# $INSTALLED the shipped filter
my ($run, $how);
if ($> == 0 && -d '/etc/fail2ban'
    && !system('unshare --mount --propagation private true 2>/dev/null'))
{
    # /etc/fail2ban as the package leaves it: the machine's, with our filter
    my $etc = tempdir(CLEANUP => 1);
    system('cp', '-a', '/etc/fail2ban/.', $etc) == 0 or die "cp /etc/fail2ban: $?";
    make_path("$etc/filter.d");
    copy($FILTER, "$etc/filter.d/pow-shield.conf") or die "copy: $!";
    my $logs = tempdir(CLEANUP => 1);
    make_path("$logs/nginx");
    copy($log, "$logs/nginx/error.log") or die "copy: $!";
    $run = sub {
        my ($cmd) = @_;
        return `unshare --mount --propagation private sh -c 'mount --bind "\$1" /etc/fail2ban && mount --bind "\$2" /var/log && exec $cmd' sh '$etc' '$logs' 2>&1`;
    };
    $how = 'as written, in a mount namespace';
} else {
    $run = sub {
        my ($cmd) = @_;
        $cmd =~ s{\Q$LOG\E}{$log};
        $cmd =~ s{\Q$INSTALLED\E}{$FILTER};
        return `$cmd 2>&1`;
    };
    $how = 'the two paths mapped to the same files (not root: no mount namespace)';
}

my $out = $run->($command);
like($out, qr/^Lines: \d+ lines, \d+ ignored, 1 matched/m,
    "$command ($how): one match") or diag($out);
$out = $run->($ips);
is(join(' ', grep { /\S/ } split /\n/, $out), '127.0.0.1',
    '... the address the breaker blocked') or diag($out);

$t->done_testing;
