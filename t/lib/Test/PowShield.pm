package Test::PowShield;

# Integration test harness for the pow-shield nginx module.
#
# One object per nginx instance: its own temporary prefix directory, its own
# free loopback ports, its own error log.  The object also runs Redis for the
# cluster-mode suites, speaks HTTP/1.x well enough to inspect our responses,
# and knows the proof-of-work wire format (docs/protocol.md) so that tests
# can solve challenges and forge tokens.
#
# Only Perl core modules are used.
#
#   use FindBin; use lib "$FindBin::Bin/lib";
#   use Test::PowShield qw(:pow :util);
#
#   my $t = Test::PowShield->new;          # skip_all if nginx/module missing
#   # http_conf: the whole nginx.conf around the inside of http { };
#   # write_file_expand: its macros (%%TEST_SERVER%%, %%PORT_8080%%, ...)
#   $t->write_file_expand('nginx.conf', http_conf(<<'EOF', workers => 2));
#       server {
#           %%TEST_SERVER%%
#           location /api/ { pow_shield_limit 10 1m; }
#       }
#   EOF
#   $t->write_file('html/api/data.json', '{}');
#   $t->run;                                # or: my ($rc, $out) = $t->test_config
#   my $r = $t->http_get('/api/data.json', 'X-Client' => 'a');
#   is($r->status, 429); my $tok = decode_token($r->header('X-PoW-Challenge'));
#   $t->reload;  $t->run_redis(requirepass => 'x');  $t->pause_redis;
#   $t->done_testing;     # stops everything, checks every error.log
#
# Environment: TEST_NGINX_BINARY, TEST_NGINX_MODULE, TEST_REDIS_BINARY,
# TEST_NGINX_LEAVE=1 (keep the temporary directories).

use strict;
use warnings;

use Test::More ();
use Carp qw(croak);
use Cwd qw(abs_path);
use Digest::SHA qw(sha256_hex hmac_sha256);
use Exporter qw(import);
use File::Basename qw(dirname);
use File::Path qw(make_path);
use File::Spec;
use File::Temp qw(tempdir);
use IO::Select;
use IO::Socket::INET;
use JSON::PP ();
use MIME::Base64 qw(encode_base64 decode_base64);
use POSIX qw(WNOHANG);
use Time::HiRes ();

use Test::PowShield::Redis;
use Test::PowShield::Response;

my @POW = qw(
    b64url_encode b64url_decode decode_token solve wrong_nonce hash_ok
    zero_bits solve_bits solution forge_token forge_token_raw sign now_ms json_encode json_decode
);
my @UTIL = qw(http_conf answered statuses eventually run_redis_cluster at_once);
my @REDIS = qw(module_script client_key client_tag spent_key fake_peer slow_proxy kill_peer);
our @EXPORT_OK = (@POW, @UTIL, @REDIS);
our %EXPORT_TAGS = (pow => \@POW, util => \@UTIL, redis => \@REDIS);

our $REPO = abs_path(File::Spec->catdir(dirname(__FILE__), '..', '..', '..'));

our @INSTANCES;     # every harness object, for the END-time cleanup
our %USED_PORTS;    # ports handed out in this process, across instances

$SIG{PIPE} = 'IGNORE';

###############################################################################
# Construction

# Test::PowShield->new(%opts)
#   binary => path      nginx binary  (TEST_NGINX_BINARY, <repo>/objs/nginx)
#   module => path|undef  module .so  (TEST_NGINX_MODULE, <repo>/objs/...so);
#                         undef: no load_module line
#   allow_missing => 1  do not skip_all when the binary or module is missing
sub new {
    my ($class, %opts) = @_;

    my $self = bless {
        binary => exists $opts{binary} ? $opts{binary} : default_binary(),
        module => exists $opts{module} ? $opts{module}
            : $ENV{TEST_NGINX_MODULE}
                || "$REPO/objs/ngx_http_pow_shield_module.so",
        ports => {},
        listen_ports => [],
        allow_emerg => 0,
        allowed_alerts => [],
        finished => 0,
    }, $class;

    unless ($opts{allow_missing}) {
        my $why = $self->missing;
        Test::More::plan(skip_all => $why) if $why;
    }

    $self->{dir} = tempdir('pow-shield-XXXXXXXX',
        TMPDIR => 1, CLEANUP => !$ENV{TEST_NGINX_LEAVE});
    chmod 0755, $self->{dir};
    Test::More::diag("test directory: $self->{dir}") if $ENV{TEST_NGINX_LEAVE};

    push @INSTANCES, $self;
    return $self;
}

# Why this instance cannot run (a skip_all reason), or undef.
sub missing {
    my ($self) = @_;
    return "nginx binary $self->{binary} not found (build it with `make build`"
        . " or set TEST_NGINX_BINARY)" unless -x $self->{binary};
    return "module $self->{module} not found (build it with `make build`"
        . " or set TEST_NGINX_MODULE)"
        if defined $self->{module} && !-f $self->{module};
    return undef;
}

# Skip the whole test file unless redis-server is available.
sub require_redis {
    my ($self) = @_;
    my $bin = Test::PowShield::Redis::binary();
    Test::More::plan(skip_all => "redis-server ($bin) not found;"
        . " install redis-server or set TEST_REDIS_BINARY")
        unless Test::PowShield::Redis::available();
    return $self;
}

sub testdir { $_[0]{dir} }
sub binary  { $_[0]{binary} }
sub module  { $_[0]{module} }

###############################################################################
# Ports

# Map a logical port (8080, 8081, 6379, ...) to a free loopback port, stable
# for the life of this object and distinct across all objects.
sub port {
    my ($self, $logical) = @_;
    croak "port: logical port required" unless defined $logical;
    return $self->{ports}{$logical} //= _free_port();
}

sub _free_port {
    for (1 .. 100) {
        my $s = IO::Socket::INET->new(
            LocalAddr => '127.0.0.1', LocalPort => 0, Proto => 'tcp',
            Listen => 1, ReuseAddr => 1,
        ) or croak "cannot bind a probe socket: $!";
        my $p = $s->sockport;
        close $s;
        next if $USED_PORTS{$p}++;
        return $p;
    }
    croak "no free port found";
}

###############################################################################
# Files

sub path {
    my ($self, $name) = @_;
    return File::Spec->file_name_is_absolute($name)
        ? $name : "$self->{dir}/$name";
}

sub write_file {
    my ($self, $name, $content) = @_;
    my $path = $self->path($name);
    make_path(dirname($path));
    open my $fh, '>', $path or croak "cannot write $path: $!";
    binmode $fh;
    print $fh $content;
    close $fh or croak "cannot write $path: $!";
    return $path;
}

# $t->run_argv(@argv) -> ($exit_code, $stdout, $stderr): runs a program
# (no shell), its output in the test directory.
sub run_argv {
    my ($self, @argv) = @_;
    my ($out, $err) = map { $self->path("run.$_") } qw(out err);
    my $pid = fork // die "fork: $!";
    if (!$pid) {
        open STDOUT, '>', $out or die "$out: $!";
        open STDERR, '>', $err or die "$err: $!";
        exec @argv;
        exit 127;
    }
    waitpid($pid, 0);
    return ($? >> 8, $self->read_file('run.out'), $self->read_file('run.err'));
}

sub read_file {
    my ($self, $name) = @_;
    my $path = $self->path($name);
    open my $fh, '<', $path or return '';
    binmode $fh;
    local $/;
    my $content = <$fh>;
    return $content // '';
}

# Write a config file after expanding:
#   %%TEST_GLOBALS%%       load_module, pid, error_log, daemon/master
#   %%TEST_GLOBALS_HTTP%%  access_log and every *_temp_path
#   %%TEST_SERVER%%        the test server's first lines, each on a line of
#                          its own at the macro's indentation: listen
#                          127.0.0.1:%%PORT_8080%%; server_name localhost;
#                          root %%TESTDIR%%/html; (that root is nginx's
#                          default under our prefix, written out)
#   %%PORT_<n>%%           $self->port(n)
#   %%TESTDIR%%            the temp directory
#   %%REDIS_PORT%%         port of the attached Redis
#   %%REDIS_PASSWORD%%     its requirepass
sub write_file_expand {
    my ($self, $name, $content) = @_;

    $content =~ s/%%TEST_GLOBALS%%/$self->test_globals/ge;
    $content =~ s/%%TEST_GLOBALS_HTTP%%/$self->test_globals_http/ge;
    $content =~ s{^([ \t]*)%%TEST_SERVER%%[ \t]*$}
        {$1listen 127.0.0.1:%%PORT_8080%%;\n$1server_name localhost;\n\n$1root %%TESTDIR%%/html;}mg;
    $content =~ s/%%PORT_(\d+)%%/$self->port($1)/ge;
    $content =~ s/%%TESTDIR%%/$self->{dir}/g;
    if ($content =~ /%%REDIS_(?:PORT|PASSWORD|TLS_PORT)%%/) {
        my $r = $self->{redis} or croak "%%REDIS_*%% used before run_redis()";
        $content =~ s/%%REDIS_PORT%%/$r->port/ge;
        $content =~ s/%%REDIS_TLS_PORT%%/$r->tls_port
            \/\/ croak "%%REDIS_TLS_PORT%% without tls"/ge;
        $content =~ s/%%REDIS_PASSWORD%%/$r->password \/\/ ''/ge;
    }

    if ($name eq 'nginx.conf') {
        my @listen = $content =~ /^\s*listen\s+(?:127\.0\.0\.1:)?(\d+)/mg;
        $self->{listen_ports} = \@listen;
    }

    return $self->write_file($name, $content);
}

# http_conf($http, %opts): a whole nginx.conf around $http, the inside of
# its http { } block (indented as there, usually a server { } with
# %%TEST_SERVER%%), for write_file_expand:
#
#   %%TEST_GLOBALS%%
#   <main>
#   worker_processes <workers>;
#   events { <events> }
#   http {
#       %%TEST_GLOBALS_HTTP%%
#       default_type application/json;
#   <http>}
#
#   workers => n     worker_processes (without it, nginx's default: 1)
#   main => '...'    more directives of the main context (env, ...)
#   events => '...'  the inside of events { }
sub http_conf {
    my ($http, %o) = @_;
    s/\n?\z/\n/ for grep { defined } @o{qw(main events)};
    my $c = "%%TEST_GLOBALS%%\n\n";
    $c .= "$o{main}\n" if defined $o{main};
    $c .= "worker_processes $o{workers};\n\n" if defined $o{workers};
    $c .= "events {\n" . ($o{events} // '') . "}\n\n";
    $c .= "http {\n    %%TEST_GLOBALS_HTTP%%\n\n    default_type application/json;\n\n";
    return "$c$http}\n";
}

sub test_globals {
    my ($self) = @_;
    my $d = $self->{dir};
    my $s = '';
    $s .= "load_module $self->{module};\n" if defined $self->{module};
    $s .= "daemon off;\n";          # we fork and own the master process
    $s .= "master_process on;\n";
    $s .= "user root;\n" if $> == 0;    # workers must read the temp dir
    $s .= "pid $d/nginx.pid;\n";
    $s .= "error_log $d/error.log debug;\n";
    return $s;
}

sub test_globals_http {
    my ($self) = @_;
    my $d = $self->{dir};
    my $s = "access_log $d/access.log;\n";
    $s .= "client_body_temp_path $d/client_body_temp;\n";
    for my $m (qw(proxy fastcgi uwsgi scgi)) {
        next unless $self->has_module($m);
        $s .= "${m}_temp_path $d/${m}_temp;\n";
    }
    return $s;
}

# Whether the nginx binary was built with an http module (by its short name,
# e.g. "proxy", "ssi"): standard modules unless --without-http_<m>_module.
# Also a class method, Test::PowShield->has_module('ssi'): of the binary
# new() takes by default.
sub has_module {
    my ($self, $m) = @_;
    my $v = $self->nginx_version_info;
    return 0 if $v =~ /--without-http_${m}_module\b/;
    return 0 if $v =~ /--without-http\b/;
    return 1;
}

my %VERSION_INFO;
sub nginx_version_info {
    my ($self) = @_;
    my $bin = ref $self ? $self->{binary} : default_binary();
    return $VERSION_INFO{$bin} //= `'$bin' -V 2>&1` // '';
}

# TEST_NGINX_BINARY, else <repo>/objs/nginx
sub default_binary { $ENV{TEST_NGINX_BINARY} || "$REPO/objs/nginx" }

###############################################################################
# nginx process control

# Start nginx on nginx.conf; wait for the pid file and every listen port.
sub run {
    my ($self) = @_;
    croak "nginx already running" if $self->{pid};
    my $d = $self->{dir};
    unlink "$d/nginx.pid";

    my $pid = fork;
    croak "fork: $!" unless defined $pid;
    if ($pid == 0) {
        open STDOUT, '>>', "$d/stderr.log";
        open STDERR, '>&', \*STDOUT;
        exec $self->{binary}, '-p', "$d/", '-c', 'nginx.conf',
            '-e', 'error.log'
            or POSIX::_exit(127);
    }
    $self->{pid} = $pid;

    my $deadline = Time::HiRes::time() + 10;
    until (-s "$d/nginx.pid") {
        if (waitpid($pid, WNOHANG) == $pid) {
            delete $self->{pid};
            croak "nginx exited at start (status $?):\n"
                . $self->read_file('stderr.log');
        }
        croak "nginx did not write its pid file in time"
            if Time::HiRes::time() > $deadline;
        Time::HiRes::sleep(0.05);
    }
    $self->_wait_ports($deadline) or croak "nginx is not listening in time";
    return $self;
}

sub _wait_ports {
    my ($self, $deadline) = @_;
    for my $p (@{$self->{listen_ports}}) {
        until (IO::Socket::INET->new(PeerAddr => "127.0.0.1:$p",
                                     Timeout => 1)) {
            return 0 if Time::HiRes::time() > $deadline;
            Time::HiRes::sleep(0.05);
        }
    }
    return 1;
}

sub master_pid { $_[0]{pid} }

# Pids of the master's children (workers, cache processes), from /proc.
sub worker_pids {
    my ($self) = @_;
    my $master = $self->{pid} or return ();
    my @pids;
    opendir my $dh, '/proc' or return ();
    for my $p (grep { /^\d+$/ } readdir $dh) {
        open my $fh, '<', "/proc/$p/stat" or next;
        my $stat = <$fh> // next;
        # pid (comm) state ppid ...; comm may contain spaces or parens
        my ($state, $ppid) = $stat =~ /\)\s+(\S)\s+(\d+)/ or next;
        push @pids, $p if $ppid == $master && $state ne 'Z';
    }
    return sort { $a <=> $b } @pids;
}

# Reload with HUP; wait until a new set of workers replaced the old one and
# the ports answer.  Returns false if that does not happen (e.g. the new
# configuration was rejected).
sub reload {
    my ($self, %opts) = @_;
    my $timeout = $opts{timeout} // 10;
    croak "nginx is not running" unless $self->{pid};
    my %old = map { $_ => 1 } $self->worker_pids;

    kill 'HUP', $self->{pid} or croak "kill HUP: $!";

    my $deadline = Time::HiRes::time() + $timeout;
    while (1) {
        my @now = $self->worker_pids;
        last if @now && !grep { $old{$_} } @now;
        return 0 if Time::HiRes::time() > $deadline;
        Time::HiRes::sleep(0.05);
    }
    return $self->_wait_ports($deadline);
}

# Graceful stop (QUIT); KILL after a timeout.
sub stop {
    my ($self) = @_;
    my $pid = delete $self->{pid} or return $self;
    kill 'QUIT', $pid;
    $self->{stopped_gracefully} = 1;
    my $deadline = Time::HiRes::time() + 20;
    while (waitpid($pid, WNOHANG) == 0) {
        if (Time::HiRes::time() > $deadline) {
            Test::More::diag("nginx $pid did not stop on QUIT; killing");
            kill 'KILL', $pid;
            waitpid($pid, 0);
            $self->{stopped_gracefully} = 0;
            last;
        }
        Time::HiRes::sleep(0.05);
    }
    return $self;
}

# After stop(): did nginx exit on QUIT by itself (not killed after the
# timeout)?  undef before any stop.
sub stopped_gracefully { $_[0]{stopped_gracefully} }

# nginx -t on a config file (default nginx.conf): returns (exit code, output).
# Negative config tests expect [emerg] lines in error.log; they are not
# reported at the end.
sub test_config {
    my ($self, $conf) = @_;
    $conf //= 'nginx.conf';
    $self->{allow_emerg} = 1;
    my $d = $self->{dir};
    my $pid = open my $fh, '-|';
    croak "fork: $!" unless defined $pid;
    if ($pid == 0) {
        open STDERR, '>&', \*STDOUT;
        exec $self->{binary}, '-t', '-p', "$d/", '-c', $conf,
            '-e', 'error.log'
            or POSIX::_exit(127);
    }
    local $/;
    my $out = <$fh> // '';
    close $fh;
    return ($? >> 8, $out);
}

# Lines of error.log matching a regex (all lines without one).
sub error_log_lines {
    my ($self, $re) = @_;
    my @lines = split /\n/, $self->read_file('error.log');
    return $re ? grep { $_ =~ $re } @lines : @lines;
}

# The counts of error.log's summary lines (`pow_shield_log_summary`) of
# one client or limit value: $re captures a line's count ("1,234") and
# whose it is; the counts of lines whose second capture is $whose, summed.
sub summarized_count {
    my ($self, $re, $whose) = @_;
    my $n = 0;
    for ($self->error_log_lines($re)) {
        my ($count, $of) = /$re/;
        next unless $of eq $whose;
        $count =~ tr/,//d;
        $n += $count;
    }
    return $n;
}

# How many lines of error.log match a regex.
sub error_log_count {
    my ($self, $re) = @_;
    return scalar(my @l = $self->error_log_lines($re));
}

# How many times error.log says a Redis became unavailable, and that one is
# available again (the module logs each transition once).
sub redis_unavailable_count {
    $_[0]->error_log_count(qr/pow_shield: redis \S+ unavailable/);
}

sub redis_available_again_count {
    $_[0]->error_log_count(qr/pow_shield: redis \S+ is available again/);
}

sub allow_emerg { $_[0]{allow_emerg} = defined $_[1] ? $_[1] : 1; $_[0] }

# Don't report [alert] lines matching this regex at the end.
sub allow_alert { push @{$_[0]{allowed_alerts}}, $_[1]; $_[0] }

sub _log_problems {
    my ($self) = @_;
    my @bad;
    for my $line ($self->error_log_lines) {
        if ($line =~ /\[alert\]/) {
            next if grep { $line =~ $_ } @{$self->{allowed_alerts}};
            push @bad, $line;
        } elsif ($line =~ /\[emerg\]/) {
            push @bad, $line unless $self->{allow_emerg};
        } elsif ($line =~ /exited on signal/) {
            push @bad, $line;
        }
    }
    return @bad;
}

###############################################################################
# Redis (cluster-mode suites)

# Start redis-server on a free port owned by this object.
#   requirepass => 'secret'
#   args => [ extra redis-server arguments ]
#   tls => { cert => ..., key => ..., ca => ..., auth_clients => ... }
#       also listen with TLS (%%REDIS_TLS_PORT%%), on a port of its own
sub run_redis {
    my ($self, %opts) = @_;
    croak "redis already running" if $self->{redis} && $self->{redis}->pid;
    $opts{tls} = { port => $self->port(6380), %{$opts{tls}} } if $opts{tls};
    $self->{redis} = Test::PowShield::Redis->new(
        dir => "$self->{dir}/redis",
        port => $self->port(6379),
        %opts,
    );
    $self->{redis}->start;
    return $self->{redis};
}

# run_redis_cluster(@instances): a Redis Cluster of one master per
# instance (no replicas) over every slot, started by `redis-cli --cluster
# create`; the other masters keep serving while one is down. Two tests:
# created, and cluster_state:ok everywhere. Returns the Redis objects.
sub run_redis_cluster {
    my (@t) = @_;
    my @r = map {
        $_->run_redis(args => ['--cluster-enabled', 'yes',
            '--cluster-config-file', $_->testdir . '/nodes.conf',
            '--cluster-node-timeout', '2000',
            '--cluster-require-full-coverage', 'no']);
    } @t;
    my $nodes = join ' ', map { '127.0.0.1:' . $_->port } @r;
    my $out = `redis-cli --cluster create $nodes --cluster-replicas 0 --cluster-yes 2>&1`;
    Test::More::is($?, 0, 'redis-cli --cluster create: ' . @r . ' masters')
        or Test::More::diag($out);
    Test::More::ok(eventually(20, sub {
        !grep { ($_->cmd('CLUSTER', 'INFO') // '') !~ /cluster_state:ok/ } @r
    }), 'cluster_state:ok on every node');
    return @r;
}

# What the module and its Redis share (Test::PowShield::Redis, the tag
# :redis): module_script($name), the Lua text of a script of the module;
# client_key($client, @parts), client_tag($client) and spent_key($token),
# its key names; fake_peer($port, $reply), a server that is not Redis;
# slow_proxy($port, $to_port, $delay), a Redis that answers late;
# kill_peer($pid) stops either.
sub module_script { Test::PowShield::Redis::module_script(@_) }
sub client_key    { Test::PowShield::Redis::client_key(@_) }
sub client_tag    { Test::PowShield::Redis::client_tag(@_) }
sub spent_key     { Test::PowShield::Redis::spent_key(@_) }
sub fake_peer     { Test::PowShield::Redis::fake_peer(@_) }
sub slow_proxy    { Test::PowShield::Redis::slow_proxy(@_) }
sub kill_peer     { Test::PowShield::Redis::kill_peer(@_) }

# Attach a Redis run by another instance, for %%REDIS_PORT%%.
sub use_redis { $_[0]{redis} = $_[1]; $_[0] }

sub redis { $_[0]{redis} }
sub stop_redis    { my $r = $_[0]{redis} or return; $r->stop }
sub redis_cmd     { my $s = shift; ($s->{redis} or croak "no redis")->cmd(@_) }
sub pause_redis   { ($_[0]{redis} or croak "no redis")->pause }
sub resume_redis  { ($_[0]{redis} or croak "no redis")->resume }
sub kill_redis    { ($_[0]{redis} or croak "no redis")->kill }
sub restart_redis { ($_[0]{redis} or croak "no redis")->restart }

###############################################################################
# HTTP client

# $t->send_request($raw, -port => logical port) -> socket, request written;
# for requests a test watches while they wait (read with read_response).
sub send_request {
    my ($self, $req, %o) = @_;
    my $s = IO::Socket::INET->new(
        PeerAddr => '127.0.0.1:' . $self->port($o{-port} // 8080),
        Proto => 'tcp', Timeout => 5) or croak "connect: $!";
    binmode $s;
    syswrite($s, $req) == length $req or croak "write: $!";
    return $s;
}

# $t->read_response($socket) -> Test::PowShield::Response: everything until
# the server closes (requests sent with HTTP/1.0 or Connection: close).
sub read_response {
    my ($self, $s) = @_;
    my $raw = '';
    my $sel = IO::Select->new($s);
    my $deadline = Time::HiRes::time() + 20;
    while (Time::HiRes::time() < $deadline) {
        next unless $sel->can_read(0.5);
        my $n = sysread($s, my $buf, 65536);
        last unless $n;
        $raw .= $buf;
    }
    close $s;
    return Test::PowShield::Response->new($raw);
}

# at_once([$t, $raw_request], ...) -> Test::PowShield::Response, ...: every
# request in flight before any response is read (all connected and written
# first, then read together, 15 s at most), in order. A code reference
# first in the list runs once every request is written.
sub at_once {
    my (@reqs) = @_;
    my $written = ref $reqs[0] eq 'CODE' ? shift @reqs : sub { };
    my @socks = map {
        my ($t, $req) = @$_;
        my $s = IO::Socket::INET->new(
            PeerAddr => '127.0.0.1:' . $t->port(8080), Proto => 'tcp',
            Timeout => 5) or croak "connect: $!";
        binmode $s;
        [$s, $req];
    } @reqs;
    syswrite($_->[0], $_->[1]) == length($_->[1]) or croak "write: $!" for @socks;
    $written->();
    my (%idx, @raw);
    my $sel = IO::Select->new;
    for my $i (0 .. $#socks) {
        $sel->add($socks[$i][0]);
        $idx{fileno $socks[$i][0]} = $i;
        $raw[$i] = '';
    }
    my $deadline = Time::HiRes::time() + 15;
    while ($sel->count && Time::HiRes::time() < $deadline) {
        for my $s ($sel->can_read(1)) {
            my $n = sysread($s, my $buf, 65536);
            if ($n) { $raw[$idx{fileno $s}] .= $buf } else { $sel->remove($s); close $s }
        }
    }
    return map { Test::PowShield::Response->new($_) } @raw;
}

# answered($socket): has the server sent anything on it yet?
sub answered { scalar IO::Select->new($_[0])->can_read(0) }

# statuses(@responses): "200 200 429" ("none" for no answer).
sub statuses { join ' ', map { $_->status // 'none' } @_ }

# eventually($seconds, sub { condition }): polls every 0.1 s; true if the
# condition held before the time ran out.
sub eventually {
    my ($secs, $cond) = @_;
    my $deadline = Time::HiRes::time() + $secs;
    until ($cond->()) {
        return 0 if Time::HiRes::time() > $deadline;
        Time::HiRes::sleep(0.1);
    }
    return 1;
}

# $t->http_get($uri, %headers) -> Test::PowShield::Response
# Options among the headers start with '-': -port => logical port (8080),
# -timeout => seconds (10), -method => 'GET', -body => string.
sub http_get {
    my ($self, $uri, %h) = @_;
    my %o;
    for my $k (grep { /^-/ } keys %h) {
        $o{$k} = delete $h{$k};
    }
    my $method = $o{-method} // 'GET';
    my $req = "$method $uri HTTP/1.0\r\nHost: localhost\r\n";
    $req .= "$_: $h{$_}\r\n" for sort keys %h;
    if (defined $o{-body}) {
        $req .= "Content-Length: " . length($o{-body}) . "\r\n";
    }
    $req .= "\r\n";
    $req .= $o{-body} if defined $o{-body};
    return $self->http($req, %o);
}

# $t->http($raw_request, -port => 8080, -timeout => 10) -> Response
# Reads until the server closes the connection; a connection closed without
# a response gives a Response with status undef.
sub http {
    my ($self, $req, %o) = @_;
    my $port = $self->port($o{-port} // 8080);
    my $timeout = $o{-timeout} // 10;

    my $s = IO::Socket::INET->new(PeerAddr => "127.0.0.1:$port",
        Proto => 'tcp', Timeout => $timeout)
        or return Test::PowShield::Response->new('', "connect: $!");
    $s->autoflush(1);
    binmode $s;

    my $deadline = Time::HiRes::time() + $timeout;
    my $sel = IO::Select->new($s);
    my $off = 0;
    while ($off < length $req) {
        my $left = $deadline - Time::HiRes::time();
        return Test::PowShield::Response->new('', 'write timeout')
            if $left <= 0 || !$sel->can_write($left);
        my $n = syswrite($s, $req, length($req) - $off, $off);
        last unless $n;     # peer closed early: read what it sent
        $off += $n;
    }

    my $raw = '';
    while (1) {
        my $left = $deadline - Time::HiRes::time();
        return Test::PowShield::Response->new($raw, 'read timeout')
            if $left <= 0 || !$sel->can_read($left);
        my $n = sysread($s, my $buf, 65536);
        last unless $n;
        $raw .= $buf;
    }
    close $s;
    return Test::PowShield::Response->new($raw);
}

# $t->http_pipeline(\@uris, %headers): one keep-alive connection, all
# requests sent at once (HTTP/1.1 pipelining), the last with
# "Connection: close"; returns one Response per request.  Same options as
# http_get (-port, -timeout, -method).
sub http_pipeline {
    my ($self, $uris, %h) = @_;
    my %o;
    for my $k (grep { /^-/ } keys %h) {
        $o{$k} = delete $h{$k};
    }
    my $method = $o{-method} // 'GET';
    my $req = '';
    for my $i (0 .. $#$uris) {
        $req .= "$method $uris->[$i] HTTP/1.1\r\nHost: localhost\r\n";
        $req .= "$_: $h{$_}\r\n" for sort keys %h;
        $req .= "Connection: close\r\n" if $i == $#$uris;
        $req .= "\r\n";
    }
    my $all = $self->http($req, %o);
    return Test::PowShield::Response->split_stream($all->raw,
        head => $method eq 'HEAD');
}

###############################################################################
# Proof of work (docs/protocol.md)

sub json_encode { JSON::PP->new->canonical->encode($_[0]) }

sub json_decode {
    my ($text) = @_;
    return undef unless defined $text;
    my $v = eval { JSON::PP->new->decode($text) };
    return $v;
}

sub b64url_encode {
    my ($bytes) = @_;
    my $s = encode_base64($bytes, '');
    $s =~ tr{+/}{-_};
    $s =~ s/=+$//;
    return $s;
}

sub b64url_decode {
    my ($s) = @_;
    return undef unless defined $s && $s =~ /^[A-Za-z0-9_-]*$/;
    $s =~ tr{-_}{+/};
    $s .= '=' x ((4 - length($s) % 4) % 4);
    return decode_base64($s);
}

# MAC of an encoded payload, base64url.
sub sign {
    my ($secret, $payload_b64) = @_;
    return b64url_encode(hmac_sha256($payload_b64, $secret));
}

# Token from a payload hash (numbers stay JSON numbers).
sub forge_token {
    my ($secret, $payload) = @_;
    return forge_token_raw($secret, json_encode($payload));
}

# Token from arbitrary payload text (for bad-payload tests).
sub forge_token_raw {
    my ($secret, $text) = @_;
    my $p = b64url_encode($text);
    return "$p." . sign($secret, $p);
}

# { payload_b64, mac_b64, payload_text, payload (hashref or undef) }
sub decode_token {
    my ($token) = @_;
    return undef unless defined $token;
    my ($p, $m, @rest) = split /\./, $token, -1;
    return undef if @rest || !defined $m;
    my $text = b64url_decode($p);
    return {
        payload_b64 => $p,
        mac_b64 => $m,
        payload_text => $text,
        payload => json_decode($text),
    };
}

sub now_ms { int(Time::HiRes::time() * 1000) }

# Does hex(sha256(salt . nonce)) start with $difficulty zeros?
sub hash_ok {
    my ($salt, $nonce, $difficulty) = @_;
    return substr(sha256_hex($salt . $nonce), 0, $difficulty)
        eq '0' x $difficulty;
}

# solution($response, wrong => 1): the headers that answer the challenge
# of a response (X-PoW-Challenge and a nonce that solves it, or with
# wrong => 1 one that does not).
sub solution {
    my ($r, %o) = @_;
    my $token = $r->header('X-PoW-Challenge') // '';
    my $p = (decode_token($token) || {})->{payload} || {};
    my ($salt, $d) = ($p->{salt} // '', $p->{difficulty} // 1);
    return ('X-PoW-Challenge' => $token,
        'X-PoW-Nonce' => $o{wrong} ? wrong_nonce($salt, $d) : solve($salt, $d));
}

# Smallest decimal nonce solving the challenge (exactly $exact zeros when
# given: a nonce for difficulty d that fails d+1).
sub solve {
    my ($salt, $difficulty, %o) = @_;
    my $zeros = '0' x $difficulty;
    for (my $n = 0; ; $n++) {
        my $h = sha256_hex($salt . $n);
        next unless substr($h, 0, $difficulty) eq $zeros;
        next if $o{exact} && substr($h, $difficulty, 1) eq '0';
        return "$n";
    }
}

# How many zero bits SHA-256(salt . nonce) starts with.
sub zero_bits {
    my ($salt, $nonce) = @_;
    my $bits = unpack('B*', Digest::SHA::sha256($salt . $nonce));
    return $bits =~ /^(0*)/ ? length $1 : 0;
}

# The smallest decimal nonce whose hash starts with $bits zero bits; with
# exact => 1 one that has exactly $bits (not one more).
sub solve_bits {
    my ($salt, $bits, %o) = @_;
    for (my $n = 0; ; $n++) {
        my $z = zero_bits($salt, $n);
        next if $z < $bits || ($o{exact} && $z > $bits);
        return "$n";
    }
}

# A decimal nonce that does NOT solve the challenge.
sub wrong_nonce {
    my ($salt, $difficulty) = @_;
    for (my $n = 0; ; $n++) {
        return "$n" unless hash_ok($salt, $n, $difficulty);
    }
}

###############################################################################
# Finishing

# Stop every instance, add a test per instance for its error log, then
# Test::More::done_testing.
sub done_testing {
    my ($self, @args) = @_;
    finish_all(1);
    Test::More::done_testing(@args);
}

# Returns the number of problems found in error.log.
sub finish {
    my ($self, $as_test) = @_;
    return 0 if $self->{finished}++;
    $self->stop;
    $self->stop_redis;
    my @bad = $self->_log_problems;
    if ($as_test) {
        my $n = 1 + (grep { $INSTANCES[$_] == $self } 0 .. $#INSTANCES)[0];
        Test::More::is(join("\n", @bad), '',
            "instance $n: error.log has no alerts, emergencies or crashes");
    } elsif (@bad) {
        Test::More::diag("error.log of $self->{dir}:\n" . join("\n", @bad));
    }
    return scalar @bad;
}

sub finish_all {
    my ($as_test) = @_;
    $_->finish($as_test) for @INSTANCES;
}

# A test that died (or forgot done_testing) still stops its processes; log
# problems then make it fail through the exit status.
END {
    my $status = $?;
    my $bad = 0;
    $bad += $_->finish(0) for @INSTANCES;
    $? = $status || ($bad ? 1 : 0);
}

1;
