package Test::PowShield::Sentinel;

# A Sentinel-managed Redis for one test (Debian's redis-sentinel): a
# master, one replica and three sentinels on loopback ports of the test's
# harness object, watching the master under the name "mymaster" with a
# one-second down-after (so a failover takes a few seconds).  kill_master()
# is the failure the sentinels resolve by promoting the replica.

use strict;
use warnings;

use Carp qw(croak);
use File::Path qw(make_path);
use Time::HiRes ();

use Test::PowShield::Redis;

sub binary { $ENV{TEST_REDIS_SENTINEL_BINARY} || 'redis-sentinel' }

sub available {
    my $bin = binary();
    return -x $bin if $bin =~ m{/};
    return grep { -x "$_/$bin" } split /:/, $ENV{PATH} // '';
}

# new($t, master_name => 'mymaster', sentinel_password => ..., requirepass => ...)
sub new {
    my ($class, $t, %o) = @_;
    my $self = bless {
        t => $t,
        name => $o{master_name} // 'mymaster',
        sentinel_password => $o{sentinel_password},
        requirepass => $o{requirepass},
        dir => $t->testdir . '/sentinel',
    }, $class;
    make_path($self->{dir});
    my @auth = defined $o{requirepass}
        ? (requirepass => $o{requirepass},
           args => ['--masterauth', $o{requirepass}])
        : ();
    $self->{redis} = [
        Test::PowShield::Redis->new(dir => "$self->{dir}/r0",
            port => $t->port('sentinel_r0'), @auth),
        Test::PowShield::Redis->new(dir => "$self->{dir}/r1",
            port => $t->port('sentinel_r1'), @auth),
    ];
    $self->{ports} = [map { $t->port("sentinel_s$_") } 0 .. 2];
    return $self;
}

sub name  { $_[0]{name} }
sub ports { @{$_[0]{ports}} }
sub redis { @{$_[0]{redis}} }

# "127.0.0.1:p1,127.0.0.1:p2,127.0.0.1:p3"
sub hosts { join ',', map { "127.0.0.1:$_" } $_[0]->ports }

sub start {
    my ($self) = @_;
    my ($r0, $r1) = $self->redis;
    $r0->start;
    push @{$r1->{args}}, '--replicaof', '127.0.0.1', $r0->port;
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
        open my $fh, '>', $conf or croak "$conf: $!";
        print $fh <<"EOF";
port $self->{ports}[$i]
bind 127.0.0.1
daemonize no
dir $dir
logfile $dir/sentinel.log
sentinel monitor $self->{name} 127.0.0.1 ${\ $r0->port} 2
sentinel down-after-milliseconds $self->{name} 1000
sentinel failover-timeout $self->{name} 10000
sentinel parallel-syncs $self->{name} 1
$auth$spass
EOF
        close $fh;
        my $pid = fork // croak "fork: $!";
        if ($pid == 0) {
            open STDOUT, '>>', "$dir/stdout";
            open STDERR, '>&', \*STDOUT;
            exec binary(), $conf or POSIX::_exit(127);
        }
        push @{$self->{pids}}, $pid;
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

# A command to sentinel $i (cmd() of a Redis object on its port).
sub sentinel_cmd {
    my ($self, $i, @args) = @_;
    my $s = $self->{sentinel_conn}[$i] //= Test::PowShield::Redis->new(
        dir => "$self->{dir}/s$i", port => $self->{ports}[$i],
        defined $self->{sentinel_password}
            ? (requirepass => $self->{sentinel_password}) : ());
    return $s->cmd(@args);
}

# The port of the master the sentinels name now.
sub master_port {
    my ($self) = @_;
    my $a = $self->sentinel_cmd(0, 'SENTINEL', 'get-master-addr-by-name', $self->{name});
    return ref $a ? $a->[1] : undef;
}

# The Redis object that is the master now.
sub master {
    my ($self) = @_;
    my $port = $self->master_port // return;
    my ($r) = grep { $_->port == $port } $self->redis;
    return $r;
}

# The master dies (SIGKILL); returns the Redis object that was it.
sub kill_master {
    my ($self) = @_;
    my $m = $self->master or croak "no master";
    $m->kill;
    return $m;
}

sub stop {
    my ($self) = @_;
    Test::PowShield::Redis::stop_pid($_, 5) for @{delete $self->{pids} // []};
    $_->stop for $self->redis;
}

sub DESTROY { $_[0]->stop }

1;
