package Test::PowShield::Sentinel;

# A Sentinel-managed Redis for one test (Debian's redis-sentinel): a
# master, one replica and three sentinels on loopback ports of the test's
# harness object, watching the master under the name "mymaster" with a
# one-second down-after (so a failover takes a few seconds).  kill_master()
# is the failure the sentinels resolve by promoting the replica.
#
# names => ['redis-a.test', 'redis-b.test']: the master and the replica
# announce these host names (replica-announce-ip), the sentinels resolve
# and announce host names (resolve-hostnames, announce-hostnames), so that
# SENTINEL get-master-addr-by-name answers a name.  The names resolve to
# 127.0.0.1 for the Redis processes only, through nss_wrapper (Debian's
# libnss-wrapper: LD_PRELOAD and a hosts file of the test's own); nginx
# never sees that file: it must ask its resolver.  names_available() says
# whether nss_wrapper is installed.
#
# tls => { cert => ..., key => ..., ca => ..., redis_cert => ..., redis_key => ... }:
# the Redis servers and the sentinels also listen with TLS (tls-port) and
# speak TLS to each other (tls-replication yes); the sentinels monitor the
# master's TLS port, so they answer TLS ports.  redis_cert/redis_key (if
# given) are the Redis servers' certificate, cert/key the sentinels'; ca
# is what every one of them trusts.  The plain ports stay open for the
# test's own commands.  tls_available() says whether redis-server was
# built with TLS.

use strict;
use warnings;

use Carp qw(croak);
use File::Path qw(make_path);
use POSIX ();
use Time::HiRes ();

use Test::PowShield::Redis;

sub binary { $ENV{TEST_REDIS_SENTINEL_BINARY} || 'redis-sentinel' }

sub available {
    my $bin = binary();
    return -x $bin if $bin =~ m{/};
    return grep { -x "$_/$bin" } split /:/, $ENV{PATH} // '';
}

# The nss_wrapper library (host names the Redis processes alone resolve).
sub nss_wrapper {
    my ($lib) = grep { -e } ($ENV{TEST_NSS_WRAPPER} // ()),
        glob('/usr/lib/*/libnss_wrapper.so'), '/usr/lib/libnss_wrapper.so';
    return $lib;
}

sub names_available { defined nss_wrapper() }

# Whether redis-server knows TLS: a build without it refuses "tls-port"
# as an unknown directive at once; one with it starts (and is stopped).
sub tls_available {
    my ($dir, $port) = @_;
    my $pid = fork // croak "fork: $!";
    if ($pid == 0) {
        open STDOUT, '>', "$dir/tls-probe.log";
        open STDERR, '>&', \*STDOUT;
        exec Test::PowShield::Redis::binary(), '--port', 0, '--tls-port', $port,
            '--bind', '127.0.0.1', '--save', '', '--tls-auth-clients', 'no',
            '--tls-cert-file', "$dir/tls-probe-none.pem",
            '--tls-key-file', "$dir/tls-probe-none.pem"
            or POSIX::_exit(127);
    }
    # without TLS: "Bad directive"; with it: it fails on the missing files
    # (one still running after 10 s started: it knows TLS)
    unless (Test::PowShield::eventually(10, sub { waitpid($pid, POSIX::WNOHANG()) == $pid })) {
        Test::PowShield::Redis::stop_pid($pid, 5);
        return 1;
    }
    open my $fh, '<', "$dir/tls-probe.log" or return 0;
    my $log = join '', <$fh>;
    return $log !~ /Bad directive|wrong number of arguments|not supported/i;
}

# new($t, master_name => 'mymaster', sentinel_password => ..., requirepass => ...,
#     names => [name0, name1], tls => { cert => ..., key => ..., ca => ... })
sub new {
    my ($class, $t, %o) = @_;
    my $self = bless {
        t => $t,
        name => $o{master_name} // 'mymaster',
        sentinel_password => $o{sentinel_password},
        requirepass => $o{requirepass},
        names => $o{names},
        tls => $o{tls},
        dir => $t->testdir . '/sentinel',
    }, $class;
    make_path($self->{dir});
    my %env;
    if (my $names = $self->{names}) {
        my $lib = nss_wrapper() or croak "nss_wrapper not installed (apt-get install libnss-wrapper)";
        my $hosts = "$self->{dir}/hosts";
        open my $fh, '>', $hosts or croak "$hosts: $!";
        print $fh "127.0.0.1 $_\n" for @$names;
        close $fh;
        %env = (LD_PRELOAD => $lib, NSS_WRAPPER_HOSTS => $hosts);
    }
    $self->{env} = \%env;
    for my $i (0, 1) {
        my @args;
        push @args, '--masterauth', $o{requirepass} if defined $o{requirepass};
        push @args, '--replica-announce-ip', $self->{names}[$i] if $self->{names};
        my @tls;
        if (my $tls = $self->{tls}) {
            push @args, '--tls-replication', 'yes';
            @tls = (tls => { port => $t->port("sentinel_r${i}_tls"),
                cert => $tls->{redis_cert} // $tls->{cert},
                key => $tls->{redis_key} // $tls->{key},
                ca => $tls->{ca}, auth_clients => 'no' });
        }
        push @{$self->{redis}}, Test::PowShield::Redis->new(dir => "$self->{dir}/r$i",
            port => $t->port("sentinel_r$i"), args => \@args, env => \%env, @tls,
            defined $o{requirepass} ? (requirepass => $o{requirepass}) : ());
    }
    $self->{ports} = [map { $t->port("sentinel_s$_") } 0 .. 2];
    $self->{tls_ports} = [map { $t->port("sentinel_s${_}_tls") } 0 .. 2]
        if $self->{tls};
    return $self;
}

sub name  { $_[0]{name} }
sub ports { @{$_[0]{ports}} }
sub redis { @{$_[0]{redis}} }
# The sentinels' TLS ports (with tls).
sub tls_ports { @{$_[0]{tls_ports} // []} }

# "127.0.0.1:p1,127.0.0.1:p2,127.0.0.1:p3" (the TLS ports with tls)
sub hosts {
    my ($self) = @_;
    return join ',', map { "127.0.0.1:$_" } $self->{tls} ? $self->tls_ports : $self->ports;
}

# The port the sentinels know Redis $r at (its TLS port with tls).
sub port_of {
    my ($self, $r) = @_;
    return $self->{tls} ? $r->tls_port : $r->port;
}

# The host the sentinels know Redis $i (0, 1) by: its name, or 127.0.0.1.
sub host_of {
    my ($self, $i) = @_;
    return $self->{names} ? $self->{names}[$i] : '127.0.0.1';
}

sub start {
    my ($self) = @_;
    my ($r0, $r1) = $self->redis;
    $r0->start;
    push @{$r1->{args}}, '--replicaof', '127.0.0.1', $self->port_of($r0);
    $r1->start;
    my $auth = defined $self->{requirepass}
        ? "sentinel auth-pass $self->{name} $self->{requirepass}\n" : '';
    my $spass = defined $self->{sentinel_password}
        ? "requirepass $self->{sentinel_password}\nsentinel sentinel-pass $self->{sentinel_password}\n"
        : '';
    for my $i (0 .. 2) {
        my $dir = "$self->{dir}/s$i";
        make_path($dir);
        my $conf = "$dir/sentinel.conf";
        my $names = $self->{names}
            ? "sentinel resolve-hostnames yes\nsentinel announce-hostnames yes\n" : '';
        my $tls = '';
        if (my $o = $self->{tls}) {
            $tls = "tls-port $self->{tls_ports}[$i]\ntls-cert-file $o->{cert}\n"
                . "tls-key-file $o->{key}\ntls-ca-cert-file $o->{ca}\n"
                . "tls-auth-clients no\ntls-replication yes\n";
        }
        open my $fh, '>', $conf or croak "$conf: $!";
        print $fh <<"EOF";
port $self->{ports}[$i]
bind 127.0.0.1
daemonize no
dir $dir
logfile $dir/sentinel.log
$names$tls
sentinel monitor $self->{name} ${\ $self->host_of(0)} ${\ $self->port_of($r0)} 2
sentinel down-after-milliseconds $self->{name} 1000
sentinel failover-timeout $self->{name} 10000
sentinel parallel-syncs $self->{name} 1
$auth$spass
EOF
        close $fh;
        $self->_spawn($i);
    }
    # every sentinel sees the replica and the two other sentinels
    my $ok = Test::PowShield::eventually(30, sub {
        for my $i (0 .. 2) {
            my $m = $self->sentinel_cmd($i, 'SENTINEL', 'MASTER', $self->{name}) or return 0;
            my %m = @$m;
            return 0 unless ($m{'num-slaves'} // 0) >= 1
                && ($m{'num-other-sentinels'} // 0) >= 2;
        }
        1;
    });
    croak "the sentinels did not see the replica and each other in time; see $self->{dir}"
        unless $ok;
    return $self;
}

# Sentinel $i runs (again) on its configuration file.
sub _spawn {
    my ($self, $i) = @_;
    my $dir = "$self->{dir}/s$i";
    my $pid = fork // croak "fork: $!";
    if ($pid == 0) {
        open STDOUT, '>>', "$dir/stdout";
        open STDERR, '>&', \*STDOUT;
        $ENV{$_} = $self->{env}{$_} for keys %{$self->{env}};
        exec binary(), "$dir/sentinel.conf" or POSIX::_exit(127);
    }
    $self->{pids}[$i] = $pid;
}

# Every sentinel stops (SIGKILL: their ports close at once).
sub kill_sentinels {
    my ($self) = @_;
    for my $pid (grep { defined } @{$self->{pids} // []}) {
        CORE::kill 'KILL', $pid;
        waitpid($pid, 0);
    }
    $self->{pids} = [];
    delete $self->{sentinel_conn};
}

# They start again (each on the configuration it rewrote) and answer.
sub start_sentinels {
    my ($self) = @_;
    $self->_spawn($_) for 0 .. 2;
    my $ok = Test::PowShield::eventually(30, sub {
        !grep { !defined $self->sentinel_cmd($_, 'PING') } 0 .. 2;
    });
    croak "the sentinels did not start again in time; see $self->{dir}" unless $ok;
    return $self;
}

# A command to sentinel $i (cmd() of a Redis object on its port).
sub sentinel_cmd {
    my ($self, $i, @args) = @_;
    my $s = $self->{sentinel_conn}[$i] //= Test::PowShield::Redis->new(
        dir => "$self->{dir}/s$i", port => $self->{ports}[$i],
        defined $self->{sentinel_password}
            ? (requirepass => $self->{sentinel_password}) : ());
    return $s->cmd(@args);
}

# What sentinel $i (0 by default) names as the master: (host, port).
sub master_addr {
    my ($self, $i) = @_;
    my $a = $self->sentinel_cmd($i // 0, 'SENTINEL', 'get-master-addr-by-name', $self->{name});
    return ref $a ? @$a : ();
}

# The port of the master the sentinels name now.
sub master_port { ($_[0]->master_addr)[1] }

# The Redis object that is the master now.
sub master {
    my ($self) = @_;
    my $port = $self->master_port // return;
    my ($r) = grep { $self->port_of($_) == $port } $self->redis;
    return $r;
}

# The master dies (SIGKILL); returns the Redis object that was it.
sub kill_master {
    my ($self) = @_;
    my $m = $self->master or croak "no master";
    $m->kill;
    return $m;
}

# failover_under($request, $switched): kills the master and sends
# requests ($request->($n) returns the response of the n-th) until
# $switched->() is true and one second more, or 60 s.  Returns the number
# of requests, { status => count } and the seconds from the kill to the
# switch (undef if it never came).  Nothing is asserted on the time.
sub failover_under {
    my ($self, $request, $switched) = @_;
    my $t0 = Time::HiRes::time();
    $self->kill_master;
    my ($n, %statuses, $t_switch) = (0);
    while (Time::HiRes::time() - $t0 < 60) {
        my $r = $request->($n++);
        $statuses{$r->status // 'none'}++;
        $t_switch = Time::HiRes::time() - $t0 if !defined $t_switch && $switched->();
        last if defined $t_switch && Time::HiRes::time() - $t0 > $t_switch + 1;
        Time::HiRes::sleep(0.02);
    }
    return ($n, \%statuses, $t_switch);
}

# "N requests, 200: N, switch logged ... S s after the kill" for diag().
sub failover_summary {
    my ($n, $statuses, $t_switch) = @_;
    return sprintf '%d requests, %s, switch logged by both workers %.1f s after the kill',
        $n, join(', ', map { "$_: $statuses->{$_}" } sort keys %$statuses), $t_switch // -1;
}

# The server block the Sentinel suites share: the client key from
# X-Client, /limited/ (5 an hour), /flow/ (100000 an hour, for the requests
# that run through a failover), and with trap => 1 a /trap, with
# metrics => 1 the status location /metrics.
sub server_block {
    my (%o) = @_;
    my $extra = '';
    $extra .= "\n        location = /trap {\n            pow_shield_trap;\n        }\n" if $o{trap};
    $extra .= "\n        location = /metrics {\n            pow_shield_status;\n        }\n"
        if $o{metrics};
    return <<"EOF";
    server {
        %%TEST_SERVER%%

        add_header X-Result \$pow_shield_result always;
        pow_shield_key \$http_x_client;

        location /limited/ {
            pow_shield_limit 5 1h;
        }

        location /flow/ {
            pow_shield_limit 100000 1h;
        }
$extra    }
EOF
}

# $t runs nginx with $conf (a whole nginx.conf), files at /limited/ and
# /flow/ to serve.
sub run_nginx {
    my ($t, $conf) = @_;
    $t->write_file_expand('nginx.conf', $conf);
    $t->write_file("html/$_/data.json", qq({"ok":true}\n)) for qw(limited flow);
    $t->run;
    return $t;
}

# A request of client $client to location $loc ("limited", "flow") of $t.
sub request {
    my ($t, $loc, $client) = @_;
    return $t->http_get("/$loc/data.json", 'X-Client' => $client);
}

# How often each (worker, sentinel port) pair logged a line of $t's
# error.log matching $re, which captures the worker's pid and the port:
# { "pid port" => count }.
sub lines_per_worker {
    my ($t, $re) = @_;
    my %per;
    for my $line ($t->error_log_lines) {
        $per{"$1 $2"}++ if $line =~ $re;
    }
    return \%per;
}

sub stop {
    my ($self) = @_;
    Test::PowShield::Redis::stop_pid($_, 5) for grep { defined } @{delete $self->{pids} // []};
    $_->stop for grep { defined } $self->redis;
}

sub DESTROY { $_[0]->stop }

1;
