package Test::PowShield::Redis;

# A redis-server on a free loopback port for one test, with the faults the
# cluster-mode suites inject: pause (SIGSTOP), resume, kill, restart on the
# same port.  cmd() speaks RESP2 over a socket with a timeout.

use strict;
use warnings;

use Carp qw(croak);
use Digest::SHA qw(sha256_hex);
use File::Find ();
use File::Path qw(make_path);
use IO::Select;
use IO::Socket::INET;
use POSIX qw(WNOHANG);
use Time::HiRes ();

sub binary { $ENV{TEST_REDIS_BINARY} || 'redis-server' }

sub available {
    my $bin = binary();
    return -x $bin if $bin =~ m{/};
    for my $d (split /:/, $ENV{PATH} // '') {
        return 1 if -x "$d/$bin";
    }
    return 0;
}

# new(dir => ..., port => ..., host => '127.0.0.1', requirepass => ..., args => [...],
#     tls => { port => ..., cert => ..., key => ..., ca => ...,
#              auth_clients => 'no' | 'optional' | 'yes' },
#     env => { NAME => value, ... })
# env: added to the server's environment (e.g. LD_PRELOAD for host names).
# With tls, Redis also listens with TLS on tls->{port}; cmd() keeps using
# the plain port.
sub new {
    my ($class, %o) = @_;
    croak "dir and port required" unless $o{dir} && $o{port};
    make_path($o{dir});
    return bless { %o, timeout => $o{timeout} // 3 }, $class;
}

sub port     { $_[0]{port} }
sub host     { $_[0]{host} // '127.0.0.1' }
sub tls_port { $_[0]{tls} ? $_[0]{tls}{port} : undef }
sub pid      { $_[0]{pid} }
sub password { $_[0]{requirepass} }
sub paused   { $_[0]{paused} }

sub start {
    my ($self) = @_;
    croak "redis already running" if $self->{pid};
    my @args = ('--port', $self->{port}, '--bind', $self->host,
        '--save', '', '--appendonly', 'no', '--daemonize', 'no',
        '--dir', $self->{dir}, '--logfile', "$self->{dir}/redis.log");
    push @args, '--requirepass', $self->{requirepass}
        if defined $self->{requirepass};
    if (my $tls = $self->{tls}) {
        push @args, '--tls-port', $tls->{port},
            '--tls-cert-file', $tls->{cert}, '--tls-key-file', $tls->{key},
            '--tls-ca-cert-file', $tls->{ca},
            '--tls-auth-clients', $tls->{auth_clients} // 'no';
    }
    push @args, @{$self->{args} || []};

    my $pid = fork;
    croak "fork: $!" unless defined $pid;
    if ($pid == 0) {
        open STDOUT, '>>', "$self->{dir}/redis.stdout";
        open STDERR, '>&', \*STDOUT;
        $ENV{$_} = $self->{env}{$_} for keys %{$self->{env} || {}};
        exec binary(), @args
            or POSIX::_exit(127);
    }
    $self->{pid} = $pid;
    $self->{paused} = 0;

    my $deadline = Time::HiRes::time() + 10;
    while (1) {
        if (waitpid($pid, WNOHANG) == $pid) {
            delete $self->{pid};
            croak "redis-server exited at start (status $?); see $self->{dir}";
        }
        my $pong = $self->cmd('PING');
        last if defined $pong && $pong eq 'PONG';
        croak "redis-server did not answer PING in time"
            if Time::HiRes::time() > $deadline;
        Time::HiRes::sleep(0.05);
    }
    return $self;
}

sub stop {
    my ($self) = @_;
    my $pid = delete $self->{pid} or return $self;
    CORE::kill 'CONT', $pid if $self->{paused};
    $self->{paused} = 0;
    stop_pid($pid, 10);
    return $self;
}

# stop_pid($pid, $secs): SIGTERM, then SIGKILL if it is still there after
# $secs; reaped either way.
sub stop_pid {
    my ($pid, $secs) = @_;
    CORE::kill 'TERM', $pid;
    my $deadline = Time::HiRes::time() + $secs;
    while (waitpid($pid, WNOHANG) == 0) {
        if (Time::HiRes::time() > $deadline) {
            CORE::kill 'KILL', $pid;
            waitpid($pid, 0);
            last;
        }
        Time::HiRes::sleep(0.05);
    }
}

# Hung server: the socket accepts bytes, nothing answers.
sub pause {
    my ($self) = @_;
    CORE::kill 'STOP', $self->{pid} or croak "kill STOP: $!";
    $self->{paused} = 1;
    return $self;
}

sub resume {
    my ($self) = @_;
    CORE::kill 'CONT', $self->{pid} or croak "kill CONT: $!";
    $self->{paused} = 0;
    return $self;
}

# Crash: SIGKILL, connections reset, port closed.
sub kill {
    my ($self) = @_;
    my $pid = delete $self->{pid} or return $self;
    CORE::kill('KILL', $pid);
    waitpid($pid, 0);
    $self->{paused} = 0;
    return $self;
}

# Start again on the same port with the same options (state is empty).
sub restart {
    my ($self) = @_;
    $self->stop if $self->{pid};
    return $self->start;
}

# cmd(@args): the decoded reply (string, integer, undef for nil, arrayref),
# or undef with $self->error set on an error reply, timeout or I/O error.
# Authenticates first when requirepass is set (unless noauth => 1 was given
# as the first two arguments).
sub cmd {
    my ($self, @args) = @_;
    my $auth = 1;
    if (@args > 1 && $args[0] eq 'noauth') {
        (undef, $auth) = splice @args, 0, 2;
        $auth = !$auth;
    }
    $self->{error} = undef;

    my $s = IO::Socket::INET->new(PeerAddr => $self->host . ":$self->{port}",
        Proto => 'tcp', Timeout => $self->{timeout});
    unless ($s) {
        $self->{error} = "connect: $!";
        return undef;
    }
    binmode $s;
    my $conn = { sock => $s, buf => '',
        deadline => Time::HiRes::time() + $self->{timeout} };

    if ($auth && defined $self->{requirepass}) {
        my ($ok, $v) = _roundtrip($conn, 'AUTH', $self->{requirepass});
        unless ($ok) {
            $self->{error} = $v;
            return undef;
        }
    }
    my ($ok, $v) = _roundtrip($conn, @args);
    close $s;
    unless ($ok) {
        $self->{error} = $v;
        return undef;
    }
    return $v;
}

sub error { $_[0]{error} }

# Whether this Redis holds keys of the module for $client (the default
# prefix "pow:"): the requests of that client were decided by it.
sub counts {
    my ($self, $client) = @_;
    return @{$self->cmd('KEYS', 'pow:{' . client_tag($client) . '}*') // []} > 0;
}

# module_script($name, cluster => 1): the Lua text of the module's script
# $name (window, approx, stacked, strike, spend, gen_spend, batch,
# generation) as Redis receives it: printed by objs/pow_shield_scripts
# (core/examples/scripts.rs, built by `make build`) from the composer
# (`Scripts::for_mode`), so the text is the module's own.
sub module_script {
    my ($name, %opt) = @_;
    my $repo = $Test::PowShield::REPO;
    my $bin = "$repo/objs/pow_shield_scripts";
    croak "no $bin: run make build" unless -x $bin;
    my @args = (($opt{cluster} ? '--cluster' : ()), $name);
    open my $fh, '-|', $bin, @args or croak "cannot run $bin: $!";
    my $text = do { local $/; <$fh> };
    close $fh or croak "$bin @args failed (exit " . ($? >> 8) . ")";
    return $text;
}

# calls(@commands): how many times Redis has run these commands so far,
# summed (INFO commandstats; lower-case names: calls(qw(evalsha eval)) is
# the module's script calls).  A command a script runs is counted under
# its own name too.
sub calls {
    my ($self, @commands) = @_;
    my %c = ($self->cmd('INFO', 'commandstats') // '') =~ /^cmdstat_([^:]+):calls=(\d+)/mg;
    my $n = 0;
    $n += $c{$_} // 0 for @commands;
    return $n;
}

# Redis Cluster: slot_owner($slot, @nodes) is the index in @nodes (this
# node's cluster, one Test::PowShield::Redis per master) of the master that
# serves $slot in this node's CLUSTER SLOTS, undef if none does.
sub slot_owner {
    my ($self, $slot, @nodes) = @_;
    for my $range (@{$self->cmd('CLUSTER', 'SLOTS') || []}) {
        next unless $range->[0] <= $slot && $slot <= $range->[1];
        my ($i) = grep { $nodes[$_]->port == $range->[2][1] } 0 .. $#nodes;
        return $i;
    }
    return undef;
}

# fake_peer($port, $reply): a fake "Redis" listening on 127.0.0.1:$port,
# in a process of its own until the test file ends: whatever a client
# sends, it answers with $reply (a string, or a sub given what it read
# that returns the answer).  What it read is all the client wrote before
# a pause of 20 ms (a handshake's scripts are more than one read).
# Returns its pid.
my @FAKE_PEERS;
sub fake_peer {
    my ($port, $reply) = @_;
    my $listen = IO::Socket::INET->new(LocalAddr => "127.0.0.1:$port",
        Listen => 16, ReuseAddr => 1, Proto => 'tcp') or croak "listen: $!";
    my $pid = fork // croak "fork: $!";
    if ($pid == 0) {
        $SIG{PIPE} = 'IGNORE';
        my $sel = IO::Select->new($listen);
        while (1) {
            for my $s ($sel->can_read(1)) {
                if ($s == $listen) {
                    $sel->add($listen->accept);
                    next;
                }
                sysread($s, my $buf, 65536) or ($sel->remove($s), next);
                while (IO::Select->new($s)->can_read(0.02)) {
                    sysread($s, $buf, 65536, length $buf) or last;
                }
                syswrite($s, ref $reply ? $reply->($buf) : $reply);
            }
        }
        POSIX::_exit(0);
    }
    close $listen;
    push @FAKE_PEERS, $pid;
    return $pid;
}

END { CORE::kill 'KILL', @FAKE_PEERS if @FAKE_PEERS }

# slow_proxy($port, $to_port, $delay): a TCP proxy on 127.0.0.1:$port in
# front of 127.0.0.1:$to_port that holds every reply for $delay seconds
# (a Redis a little slower than the module's timeout=), in a process of
# its own until the test file ends or kill_peer($pid).  Returns its pid.
sub slow_proxy {
    my ($port, $to_port, $delay) = @_;
    my $listen = IO::Socket::INET->new(LocalAddr => "127.0.0.1:$port",
        Listen => 16, ReuseAddr => 1, Proto => 'tcp') or croak "listen: $!";
    my $pid = fork // croak "fork: $!";
    if ($pid == 0) {
        my $sel = IO::Select->new($listen);
        my (%peer, %from_redis, @queue);   # socket -> other end; [due, bytes, client]
        while (1) {
            my $now = Time::HiRes::time();
            while (@queue && $queue[0][0] <= $now) {
                my ($due, $bytes, $c) = @{shift @queue};
                syswrite($c, $bytes) if $peer{$c};
            }
            for my $s ($sel->can_read(0.005)) {
                if ($s == $listen) {
                    my $c = $listen->accept or next;
                    my $u = IO::Socket::INET->new(PeerAddr => "127.0.0.1:$to_port",
                        Proto => 'tcp') or (close($c), next);
                    @peer{$c, $u} = ($u, $c);
                    $from_redis{$u} = 1;
                    $sel->add($c, $u);
                    next;
                }
                my $other = $peer{$s} or next;
                my $buf;
                if (!sysread($s, $buf, 65536)) {
                    $sel->remove($s, $other);
                    delete @peer{$s, $other};
                    delete @from_redis{$s, $other};
                    close $s;
                    close $other;
                    next;
                }
                if ($from_redis{$s}) {
                    push @queue, [Time::HiRes::time() + $delay, $buf, $other];
                } else {
                    syswrite($other, $buf);
                }
            }
        }
        POSIX::_exit(0);
    }
    close $listen;
    push @FAKE_PEERS, $pid;
    return $pid;
}

# kill_peer($pid): stops a fake_peer or slow_proxy (its connections reset).
sub kill_peer {
    my ($pid) = @_;
    CORE::kill 'KILL', $pid;
    waitpid($pid, 0);
    @FAKE_PEERS = grep { $_ != $pid } @FAKE_PEERS;
}

# The module's Redis keys (docs/operations.md "Sizing Redis", the default
# prefix "pow:"): client_key($client, @parts) is "pow:{<tag>}:<parts>"
# (client_key('a', 's') the strikes of client "a", client_key('a', 'w',
# 3, 3600000) its window for pow_shield_limit 3 1h; client_key("\0" .
# '192.0.2.7', 's') the default key's, "pow:{@192.0.2.7}:s");
# spent_key($token) is the record of a spent challenge.
sub client_key {
    my ($client, @parts) = @_;
    return join ':', 'pow:{' . client_tag($client) . '}', @parts;
}

# client_tag($client): the client key as the module writes it in key names
# (core's command::client_tag): a NUL byte "@", printable ASCII as it is
# but for {}%#@*?[]\"' which, a space and any other byte are "%xx"; a tag
# longer than 64 characters is "#" and the base64url of the key's SHA-256.
sub client_tag {
    my ($client) = @_;
    my $tag = join '', map {
        $_ eq "\0"                              ? '@'
            : /[!-~]/ && !/[{}%#\@*?\[\]\\"'+]/ ? $_
            :                                    sprintf('%%%02x', ord)
    } split //, $client;
    return $tag if length $tag <= 64;
    (my $hashed = Digest::SHA::sha256_base64($client)) =~ tr{+/}{-_};
    return "#$hashed";
}

sub spent_key { 'pow:spent:{' . sha256_hex($_[0] // '') . '}' }

sub _roundtrip {
    my ($conn, @args) = @_;
    my $req = '*' . @args . "\r\n";
    $req .= '$' . length($_) . "\r\n$_\r\n" for @args;
    my $sel = IO::Select->new($conn->{sock});
    my $off = 0;
    while ($off < length $req) {
        my $left = $conn->{deadline} - Time::HiRes::time();
        return (0, 'timeout') if $left <= 0 || !$sel->can_write($left);
        my $n = syswrite($conn->{sock}, $req, length($req) - $off, $off);
        return (0, "write: $!") unless $n;
        $off += $n;
    }
    return _reply($conn);
}

# Read one line (without CRLF) from the connection buffer.
sub _line {
    my ($conn) = @_;
    while ((my $i = index($conn->{buf}, "\r\n")) < 0) {
        _fill($conn) or return;
    }
    my $i = index($conn->{buf}, "\r\n");
    my $line = substr($conn->{buf}, 0, $i);
    substr($conn->{buf}, 0, $i + 2, '');
    return $line;
}

sub _bytes {
    my ($conn, $n) = @_;
    while (length($conn->{buf}) < $n + 2) {
        _fill($conn) or return;
    }
    my $b = substr($conn->{buf}, 0, $n);
    substr($conn->{buf}, 0, $n + 2, '');
    return $b;
}

sub _fill {
    my ($conn) = @_;
    my $left = $conn->{deadline} - Time::HiRes::time();
    if ($left <= 0 || !IO::Select->new($conn->{sock})->can_read($left)) {
        $conn->{err} = 'timeout';
        return 0;
    }
    my $n = sysread($conn->{sock}, my $buf, 65536);
    unless ($n) {
        $conn->{err} = defined $n ? 'connection closed' : "read: $!";
        return 0;
    }
    $conn->{buf} .= $buf;
    return 1;
}

# (1, value) or (0, error text)
sub _reply {
    my ($conn) = @_;
    my $line = _line($conn);
    return (0, $conn->{err}) unless defined $line;
    my ($type, $rest) = (substr($line, 0, 1), substr($line, 1));
    return (1, $rest) if $type eq '+';
    return (0, $rest) if $type eq '-';
    return (1, 0 + $rest) if $type eq ':';
    if ($type eq '$') {
        return (1, undef) if $rest < 0;
        my $b = _bytes($conn, $rest);
        return defined $b ? (1, $b) : (0, $conn->{err});
    }
    if ($type eq '*') {
        return (1, undef) if $rest < 0;
        my @items;
        for (1 .. $rest) {
            my ($ok, $v) = _reply($conn);
            # an error inside an array (EXEC) is kept as its text
            return (0, $v) if !$ok && defined $conn->{err};
            push @items, $v;
        }
        return (1, \@items);
    }
    return (0, "bad reply: $line");
}

1;
