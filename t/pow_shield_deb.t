#!/usr/bin/perl

# The Debian package (`make deb`, debian/): dpkg -i installs it, its
# maintainer script enables the module in /etc/nginx/modules-enabled/,
# Debian's /usr/sbin/nginx is started the way its systemd unit starts it, on
# the stock /etc/nginx/nginx.conf (which includes modules-enabled/*.conf),
# with the stock default site on port 80 and a site of ours in conf.d/ that
# shields a location; then nginx is stopped and the package removed and
# purged, and the module is gone from the configuration again. The http
# level lines are docs/operations.md's (its /etc/nginx/conf.d/ snippet),
# the key file made with the README's command. The package also installs the fail2ban
# filter and jail (conffiles in /etc/fail2ban/, the jail off until the
# documented .local turns it on: then the jail loads and the documented
# fail2ban-regex command finds the client whose breaker opened in nginx's
# log), the Prometheus rules and the Grafana dashboard among its
# examples, the pow-shield CLI (used here as docs/operations.md uses it, to
# show and lift a block) and every document the README links.
#
# All of it happens in a throw-away copy of this machine: the test runs
# itself again under unshare(1), in new mount, network and PID namespaces.
# There /etc/nginx, /etc/fail2ban, /usr/bin, /usr/lib/nginx, /usr/share/nginx,
# /usr/share/doc, /var/lib/dpkg, /var/log and /var/lib/nginx are overlays
# whose writes go to a tmpfs, /run and /tmp are fresh tmpfs (the package is
# copied in first: it may be in the machine's /tmp, as is a clone there),
# and the loopback interface is the
# namespace's own (port 80 is free whatever runs on the machine). dpkg, the
# package's scripts and nginx change only those; the machine's own
# /etc/nginx and dpkg database are checked to be unchanged. When the test
# ends the kernel drops the mounts and kills whatever it left running.
#
# Skipped unless root, with dpkg, Debian's nginx, fail2ban (/etc/fail2ban,
# where the package installs), unshare and overlayfs, and the package built
# (`make test` builds it as root; TEST_POW_SHIELD_DEB=path names another).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Cwd qw(abs_path);
use Digest::MD5 qw(md5_hex);
use File::Basename qw(basename);
use File::Copy qw(copy);
use File::Path qw(make_path);
use IO::Socket::INET;
use POSIX qw(WNOHANG);
use Test::More;
use Test::PowShield qw(:pow :util);

###############################################################################

my $package = 'libnginx-mod-http-pow-shield';
my $so = 'ngx_http_pow_shield_module.so';
my $nginx = '/usr/sbin/nginx';
my $repo = $Test::PowShield::REPO;

my $so_path = "/usr/lib/nginx/modules/$so";
my $available = '/usr/share/nginx/modules-available/mod-http-pow-shield.conf';
my $enabled = '/etc/nginx/modules-enabled/50-mod-http-pow-shield.conf';

# the directories the package, dpkg and nginx write to: overlays
my @overlays = qw(/etc/nginx /etc/fail2ban /usr/bin /usr/lib/nginx /usr/share/nginx
    /usr/share/doc /var/lib/dpkg /var/log /var/lib/nginx);

# the machine itself, seen from inside (a bind mount made before /tmp and
# the overlays are mounted, so its /tmp is the machine's)
my $machine = '/run/pow-shield-deb/machine';

my $docs = "/usr/share/doc/$package";
my $filter = '/etc/fail2ban/filter.d/pow-shield.conf';
my $jail = '/etc/fail2ban/jail.d/pow-shield.conf';
my $cli = '/usr/bin/pow-shield';
my @shipped = ($filter, $jail, $cli, "$docs/examples/prometheus/pow-shield.rules.yml",
    "$docs/examples/prometheus/pow-shield.rules.test.yml",
    "$docs/examples/grafana/pow-shield.json");

sub cargo_version {
    open my $fh, '<', "$repo/Cargo.toml" or return '';
    while (<$fh>) {
        return $1 if /^version\s*=\s*"([^"]+)"/;
    }
    return '';
}

# runs a command; returns (exit code, stdout and stderr). The output goes
# through an anonymous file (a daemon would keep a pipe open).
sub run {
    my (@cmd) = @_;
    open my $log, '+>', undef or die "temporary file: $!";
    my $pid = fork // die "fork: $!";
    if ($pid == 0) {
        open STDIN, '<', '/dev/null';
        open STDOUT, '>&', $log or POSIX::_exit(127);
        open STDERR, '>&', $log;
        exec @cmd or POSIX::_exit(127);
    }
    waitpid($pid, 0);
    my $rc = $? >> 8;
    seek $log, 0, 0;
    local $/;
    my $out = <$log> // '';
    close $log;
    return ($rc, $out);
}

###############################################################################
# Outside: skip, or run again in the namespaces.

unless ($ENV{POW_SHIELD_DEB_INNER}) {
    plan skip_all => 'not root (dpkg -i)' if $> != 0;
    plan skip_all => 'no dpkg' unless -x '/usr/bin/dpkg';
    plan skip_all => "Debian nginx $nginx not installed" unless -x $nginx;
    plan skip_all => 'fail2ban not installed (Debian: fail2ban; the package'
        . ' installs in /etc/fail2ban, an overlay here)' unless -d '/etc/fail2ban';
    my ($rc) = run('unshare', '--version');
    plan skip_all => 'unshare (util-linux) not found' if $rc;

    my $deb = $ENV{TEST_POW_SHIELD_DEB};
    unless ($deb) {
        my ($arc, $arch) = run('dpkg', '--print-architecture');
        chomp $arch;
        my $version = cargo_version();
        ($deb) = sort { -M $a <=> -M $b }
            glob("$repo/${package}_${version}-*_${arch}.deb");
    }
    plan skip_all => "the package is not built ($repo/${package}_<version>_"
        . "<arch>.deb: make deb; make test builds it as root)"
        unless $deb && -f $deb;

    # can we make the throw-away root here (not in an unprivileged container)?
    my ($prc, $pout) = run('unshare', '--mount', '--net', '--pid', '--fork',
        '--mount-proc', 'sh', '-c', 'mount -t tmpfs tmpfs /tmp &&'
        . ' mkdir /tmp/u /tmp/w && mount -t overlay overlay'
        . ' -o lowerdir=/etc/nginx,upperdir=/tmp/u,workdir=/tmp/w /etc/nginx');
    plan skip_all => "no namespaces or overlayfs here: $pout" if $prc;

    $ENV{POW_SHIELD_DEB_INNER} = 1;
    $ENV{TEST_POW_SHIELD_DEB} = abs_path($deb);
    # --kill-child: an interrupted run takes the namespaces down with it
    exec 'unshare', '--mount', '--net', '--pid', '--fork', '--mount-proc',
        '--propagation', 'private', '--kill-child',
        $^X, "$FindBin::Bin/$FindBin::Script";
    die "exec unshare: $!";
}

###############################################################################
# Inside: the throw-away root.

die "not in the namespaces unshare made (pid $$)\n" unless $$ == 1;

# what is read from the tree, read before /tmp (where it may be) is hidden
my $cargo = cargo_version();
my ($readme, $operations) = map {
    open my $fh, '<', "$repo/$_" or die "$_: $!";
    local $/;
    scalar <$fh>;
} qw(README.md docs/operations.md);
# the documents the README links (each in the package's doc directory;
# dh_compress gzips the larger ones)
my %linked;
$linked{$1} = 1 while $readme =~ m{\]\((?:\./)?docs/([\w-]+\.md)(?:#[^)]*)?\)}g;
$ENV{PATH} = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';
$ENV{TMPDIR} = '/tmp';
$ENV{DEBIAN_FRONTEND} = 'noninteractive';

sub setup {
    my (@cmd) = @_;
    my ($rc, $out) = run(@cmd);
    die "@cmd: $out\n" if $rc;
}

setup('mount', '-t', 'tmpfs', '-o', 'mode=0755', 'tmpfs', '/run');
make_path($machine);
setup('mount', '--rbind', '/', $machine);
setup('mount', '-t', 'tmpfs', '-o', 'mode=1777', 'tmpfs', '/tmp');
# the package, from the machine's view of its path
my $deb = '/tmp/' . basename($ENV{TEST_POW_SHIELD_DEB});
copy("$machine$ENV{TEST_POW_SHIELD_DEB}", $deb)
    or die "copy $machine$ENV{TEST_POW_SHIELD_DEB}: $!\n";
for my $dir (grep { -d } @overlays) {
    (my $name = $dir) =~ tr{/}{_};
    my ($upper, $work) = ("/tmp/overlay/$name/upper", "/tmp/overlay/$name/work");
    make_path($upper, $work);
    setup('mount', '-t', 'overlay', 'overlay', '-o',
        "lowerdir=$dir,upperdir=$upper,workdir=$work", $dir);
}
# a machine whose /dev/null is no device: a real one, in here only
unless (-c '/dev/null') {
    setup('mknod', '-m', '666', '/tmp/null', 'c', '1', '3');
    setup('mount', '--bind', '/tmp/null', '/dev/null');
}
setup('ip', 'link', 'set', 'lo', 'up');

# what the machine has (and must still have at the end): its nginx
# configuration, modules, the package's dpkg status and its CLI
sub machine_state {
    my ($rc, $files) = run('find', map({ "$machine$_" } qw(/etc/nginx /etc/fail2ban
        /usr/lib/nginx/modules /usr/share/nginx/modules-available)),
        '-printf', '%p %y %l %s %T@\n');
    my (undef, $status) = run('dpkg-query', "--admindir=$machine/var/lib/dpkg",
        '-W', '-f', '${db:Status-Abbrev} ${Version}', $package);
    my $cli_there = -e "$machine/usr/bin/pow-shield" ? 'present' : 'absent';
    return join '', sort(split /^/, $files), "dpkg: $status\n", "/usr/bin/pow-shield: $cli_there\n";
}
my $machine_before = machine_state();

my $t = Test::PowShield->new(binary => $nginx, module => undef);
my $d = $t->testdir;

# A copy already installed on the machine: purged in here first, so that
# this is a first installation.
my ($unknown, $had) = run('dpkg-query', '-W', '-f', '${db:Status-Abbrev}', $package);
$had =~ s/\s+$//;
if (!$unknown && $had !~ /^.n/) {
    diag("this machine has $package ($had): purged in the throw-away root first");
    my ($rc, $out) = run('dpkg', '--purge', $package);
    die "dpkg --purge: $out\n" if $rc;
}

###############################################################################
# The package: where its files go, its version, its Depends

my @paths = map { my $p = (split ' ')[5]; $p =~ s{^\.}{}; $p =~ s{/$}{}; $p || '/' }
    grep { /\S/ } split /\n/, (run('dpkg-deb', '-c', $deb))[1];
ok(@paths > 3, "dpkg-deb -c: " . @paths . ' entries');
my @outside = grep {
    my $p = $_;
    !grep { $p eq $_ || index($p, "$_/") == 0 || index($_, $p eq '/' ? '/' : "$p/") == 0 }
        @overlays;
} @paths;
is("@outside", '', 'every path of the package is in the throw-away overlays');
ok((grep { $_ eq $so_path } @paths), "the package holds $so_path");
for my $file (@shipped) {
    ok((grep { $_ eq $file } @paths), "the package holds $file");
}
my (undef, $ours) = run('sh', '-c', "dpkg-deb --ctrl-tarfile '$deb' | tar -xO ./conffiles");
is(join(' ', sort split " ", $ours), join(' ', sort $filter, $jail),
    'its conffiles: the fail2ban filter and jail');

my (undef, $fields) = run('dpkg-deb', '-f', $deb, 'Version', 'Depends');
my ($version) = $fields =~ /^Version: (\S+)/m;
my ($depends) = $fields =~ /^Depends: (.*)$/m;
like($version // '', qr/^\Q$cargo\E-\d+$/,
    'Version ' . ($version // 'none') . ": Cargo.toml's $cargo and a revision");

my (undef, $owner) = run('dpkg-query', '-S', $nginx);
($owner) = $owner =~ /^([^:\s]+):/;
$owner //= 'nginx';
my (undef, $provides) = run('dpkg-query', '-W', '-f', '${Provides}', $owner);
my ($abi) = ($provides // '') =~ /\b(nginx-abi-[^\s,]+)/;
ok($abi, "the installed $owner provides an ABI: " . ($abi // 'none'));
like($depends // '', qr/(?:^|,\s*)\Q$abi\E(?:,|$)/,
    "Depends: $depends (the ABI of this nginx exactly)") if $abi;

###############################################################################
# dpkg -i: the module, its load file and the link that enables it

my ($rc, $out) = run('dpkg', '-i', $deb);
is($rc, 0, "dpkg -i $deb") or diag($out);

my (undef, $status) = run('dpkg-query', '-W', '-f', '${db:Status-Status}', $package);
is($status, 'installed', "$package is installed");
ok(-f $so_path, "$so_path installed");
is($t->read_file($available), "load_module modules/$so;\n", "$available: the load_module line");
is(readlink($enabled), $available, "$enabled links to it (postinst)");
is(machine_state(), $machine_before,
    "the machine's own /etc/nginx, modules and dpkg database are untouched");

# the stock nginx.conf
my $conf = $t->read_file('/etc/nginx/nginx.conf');
like($conf, qr{^\s*include\s+/etc/nginx/modules-enabled/\*\.conf;}m,
    '/etc/nginx/nginx.conf includes modules-enabled/*.conf');
my (undef, $conffiles) = run('dpkg-query', '-W', '-f', '${Conffiles}', 'nginx-common');
my ($stock_md5) = $conffiles =~ m{^\s*/etc/nginx/nginx\.conf\s+(\S+)}m;
diag("note: this machine's /etc/nginx/nginx.conf is not nginx-common's")
    if $stock_md5 && $stock_md5 ne md5_hex($conf);

# without IPv6, the stock default site ([::]:80) cannot start
my $default_site = -e '/etc/nginx/sites-enabled/default';
if ($default_site && !-e '/proc/net/if_inet6'
    && $t->read_file('/etc/nginx/sites-enabled/default') =~ /listen\s+\[::\]/)
{
    diag('no IPv6 here: the stock default site is disabled in the throw-away root');
    unlink '/etc/nginx/sites-enabled/default';
    $default_site = 0;
}

###############################################################################
# The package's other files: fail2ban's (off), Prometheus's, Grafana's

ok(-f $_, "$_ installed") for @shipped;
ok(-x $cli, "$cli is executable");
my ($vrc, $vout) = run($cli, '--version');
like($vout, qr/^pow-shield \Q$cargo\E$/m, "$cli --version: Cargo.toml's $cargo") or diag($vout);
ok(scalar(keys %linked) >= 5, 'README.md links documents of docs/: ' . join(' ', sort keys %linked));
for my $doc (sort keys %linked) {
    ok(-f "$docs/$doc" || -f "$docs/$doc.gz", "$docs/$doc installed (README.md links it)");
}
my @sections = $t->read_file($jail) =~ /^\[([\w-]+)\]/mg;
my @enabled = $t->read_file($jail) =~ /^enabled\s*=\s*(\S+)/mg;
is("@enabled", join(' ', ('false') x @sections), "$jail: every jail off (@sections)");

###############################################################################
# The admin's part, as the README and docs/operations.md say: the
# http-level lines in conf.d/ (included in http{} by nginx.conf), a key
# file, and a site's server

my ($key_command) = $readme =~ /^Make a key file with `([^`]+)`/m;
ok($key_command, "README.md: $key_command");
($rc, $out) = run('sh', '-c', $key_command // 'false');
is($rc, 0, '... makes /etc/nginx/pow_shield.key') or diag($out);
my ($confd) = $operations =~ m{^```nginx\n(# /etc/nginx/conf\.d/pow-shield\.conf .*?)^```}ms;
ok($confd, "docs/operations.md: the lines for /etc/nginx/conf.d/pow-shield.conf");
$t->write_file('/etc/nginx/conf.d/pow-shield.conf', $confd // '');

my $port = $t->port(8080);
$t->write_file('/etc/nginx/conf.d/pow-shield-test.conf', <<"EOF");
server {
    listen 127.0.0.1:$port;
    server_name localhost;

    root $d/html;

    location /api/ {
        pow_shield_limit 2 1h;
        pow_shield_difficulty 1;
    }

    location = /pow-shield/admin {
        pow_shield_admin;
        allow 127.0.0.1;
        deny  all;
    }
}
EOF
$t->write_file('html/api/data.json', qq({"ok":true}\n));

($rc, $out) = run($nginx, '-t');
is($rc, 0, 'nginx -t on /etc/nginx/nginx.conf') or diag($out);

# the systemd unit's ExecStart
($rc, $out) = run($nginx, '-g', 'daemon on; master_process on;');
is($rc, 0, "$nginx started (daemon, /run/nginx.pid)") or diag($out);
my $master;
ok(eventually(10, sub {
    ($master) = $t->read_file('/run/nginx.pid') =~ /(\d+)/;
    $master && IO::Socket::INET->new(PeerAddr => "127.0.0.1:$port", Timeout => 1);
}), "nginx (master $master) listens on 127.0.0.1:$port");

if ($default_site) {
    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1:80', Timeout => 5);
    my $raw = '';
    if ($s) {
        print $s "GET / HTTP/1.0\r\nHost: localhost\r\n\r\n";
        local $/;
        $raw = <$s> // '';
    }
    my $r = Test::PowShield::Response->new($raw);
    is($r->status, 200, 'the stock default site on port 80: 200');
}

# green, then 429 with a challenge after the limit, then solved
my $r = $t->http_get('/api/data.json');
is($r->status, 200, 'request 1 of 2: 200');
is($r->header('X-RateLimit-Remaining'), 1, 'rate-limit headers');
is($t->http_get('/api/data.json')->status, 200, 'request 2 of 2: 200');
$r = $t->http_get('/api/data.json');
is($r->status, 429, 'request 3: 429');
is(($r->json || {})->{error}, 'PoW challenge required', '429: challenge body');
$r = $t->http_get('/api/data.json', solution($r));
is($r->status, 200, 'solved challenge: 200');

# a client that ignores its challenges: the default breaker (5 strikes)
is(statuses(map { $t->http_get('/api/data.json') } 1 .. 6), '429 429 429 429 429 403',
    'five unpaid 429s open the breaker: 403');

# the package's CLI, as docs/operations.md ("Seeing and lifting a block")
# uses it: show, then lift the block
for my $action (qw(show lift)) {
    my ($line) = $operations =~ m{^(pow-shield admin http://127\.0\.0\.1/pow-shield/admin \Q$action\E \S+)$}m;
    ok($line, "docs/operations.md: $line");
    (my $here = $line // 'false') =~ s{http://127\.0\.0\.1/}{http://127.0.0.1:$port/};
    $here =~ s{ \S+$}{ 127.0.0.1};
    ($rc, $out) = run('sh', '-c', $here);
    is($rc, 0, "$here: exit 0") or diag($out);
    like($out, $action eq 'show' ? qr/"block":"blocked"/ : qr/"lifted":\{"node":true/,
        $action eq 'show' ? '... the client is blocked' : '... its block is lifted') or diag($out);
}
is($t->http_get('/api/data.json')->status, 429, 'lifted: the client is challenged again, not blocked');

($rc, $out) = run($nginx, '-s', 'quit');
is($rc, 0, 'nginx -s quit') or diag($out);
ok(eventually(20, sub {
    1 while waitpid(-1, WNOHANG) > 0;    # we are its init: reap it
    !$master || !kill 0, $master;
}), 'nginx stopped');

my @bad = grep { /\[(?:alert|emerg)\]|exited on signal/ }
    split /\n/, $t->read_file('/var/log/nginx/error.log');
is(join("\n", @bad), '', '/var/log/nginx/error.log: no alerts, emergencies or crashes');
like($t->read_file('/var/log/nginx/error.log'),
    qr/pow_shield: breaker opened: client=127\.0\.0\.1 key=address strikes=5/,
    '/var/log/nginx/error.log: the breaker line');

###############################################################################
# fail2ban, as docs/operations.md says (no server is started: -d prints the
# configuration it would load)

SKIP: {
    skip 'no fail2ban-client', 6 if (run('sh', '-c', 'command -v fail2ban-client'))[0];
    (undef, $out) = run('fail2ban-client', '-d');
    unlike($out, qr/'add', 'pow-shield/, 'fail2ban: no pow-shield jail until enabled');

    my ($enable, $regex) = map { my $re = $_; ($operations =~ /^($re)$/m)[0] }
        qr{printf .*> /etc/fail2ban/jail\.d/pow-shield\.local},
        qr{fail2ban-regex /var/log/nginx/error\.log /etc/fail2ban/filter\.d/pow-shield\.conf};
    ok($enable && $regex, "docs/operations.md: $enable; $regex");
    ($rc, $out) = run('sh', '-c', $enable // 'false');
    # only ours: the machine's other jails (Debian's sshd) may lack their logs
    unlink grep { !m{/pow-shield\.(?:conf|local)$} } glob('/etc/fail2ban/jail.d/*');
    ($rc, $out) = run('fail2ban-client', '-t') unless $rc;
    is($rc, 0, '... the enabled jail passes fail2ban-client -t') or diag($out);
    (undef, $out) = run('fail2ban-client', '-d');
    like($out, qr/'add', 'pow-shield',/, '... and is loaded') or diag($out);
    ($rc, $out) = run('sh', '-c', $regex // 'false');
    is($rc, 0, "$regex runs") or diag($out);
    like($out, qr/^Lines: \d+ lines, \d+ ignored, 1 matched/m, '... and finds the blocked client')
        or diag($out);
    unlink '/etc/fail2ban/jail.d/pow-shield.local';
}

###############################################################################
# dpkg -r, then dpkg -P: the module leaves the configuration

unlink '/etc/nginx/conf.d/pow-shield-test.conf', '/etc/nginx/conf.d/pow-shield.conf';

($rc, $out) = run('dpkg', '-r', $package);
is($rc, 0, "dpkg -r $package") or diag($out);
ok(!-e $so_path, "$so_path removed");
ok(-e $filter && -e $jail, 'the fail2ban conffiles stay until purged');
ok(!-e $enabled && -l "$enabled.removed",
    "the link is put aside as $enabled.removed (prerm; a reinstall restores it)");
($rc, $out) = run($nginx, '-t');
is($rc, 0, 'nginx -t without the module') or diag($out);

($rc, $out) = run('dpkg', '-P', $package);
is($rc, 0, "dpkg -P $package") or diag($out);
ok(!-e $enabled && !-l "$enabled.removed", 'no link left (postrm purge)');
ok(!-e $filter && !-e $jail, 'the fail2ban conffiles are purged');
(undef, $status) = run('dpkg-query', '-W', '-f', '${db:Status-Status}', $package);
isnt($status, 'installed', "$package is gone from dpkg's database");

is(machine_state(), $machine_before,
    "the machine's own /etc/nginx, modules and dpkg database are as before");

###############################################################################

$t->done_testing;
