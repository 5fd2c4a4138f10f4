package Test::PowShield::DNS;

# A small DNS responder for one test, on a loopback UDP port, in a process
# of its own: it answers A queries for the names in a file the test
# rewrites ("name address" per line, read on every query), with a TTL of
# one second, so that a name can move (a "failover") while nginx runs.
# AAAA and other types get an empty answer; unknown names NXDOMAIN.
# Core Perl only.

use strict;
use warnings;

use Carp qw(croak);
use IO::Socket::INET;
use POSIX ();

my @PIDS;

# new($t, port => ..., names => { 'redis.test' => '127.0.0.1' })
sub new {
    my ($class, $t, %o) = @_;
    my $self = bless {
        port => $o{port} // $t->port('dns'),
        file => $t->testdir . '/dns-names',
        queries => $t->testdir . '/dns-queries',
    }, $class;
    $self->set(%{$o{names} // {}});
    return $self;
}

sub port { $_[0]{port} }

# set(name => address, ...): what the names resolve to from now on.
sub set {
    my ($self, %names) = @_;
    open my $fh, '>', "$self->{file}.tmp" or croak "$self->{file}: $!";
    print $fh "$_ $names{$_}\n" for sort keys %names;
    close $fh;
    rename "$self->{file}.tmp", $self->{file} or croak "rename: $!";
    return $self;
}

# How many queries for $name it answered.
sub queries {
    my ($self, $name) = @_;
    open my $fh, '<', $self->{queries} or return 0;
    return scalar grep { /^\Q$name\E\b/ } <$fh>;
}

sub start {
    my ($self) = @_;
    my $sock = IO::Socket::INET->new(LocalAddr => "127.0.0.1:$self->{port}",
        Proto => 'udp') or croak "dns: bind: $!";
    my $pid = fork // croak "fork: $!";
    if ($pid == 0) {
        while (1) {
            my $peer = $sock->recv(my $q, 512) // next;
            my $reply = eval { $self->_answer($q) } // next;
            $sock->send($reply, 0, $peer);
        }
        POSIX::_exit(0);
    }
    close $sock;
    push @PIDS, $pid;
    $self->{pid} = $pid;
    return $self;
}

sub _names {
    my ($self) = @_;
    open my $fh, '<', $self->{file} or return {};
    return { map { split ' ' } grep { /\S/ } <$fh> };
}

sub _answer {
    my ($self, $q) = @_;
    my ($id, $flags, $qd) = unpack 'n n n', $q;
    return undef unless $qd == 1;
    my ($pos, @labels) = (12);
    while (1) {
        my $len = ord substr($q, $pos, 1);
        $pos++;
        last if $len == 0;
        push @labels, substr($q, $pos, $len);
        $pos += $len;
    }
    my ($type, $class) = unpack 'n n', substr($q, $pos, 4);
    my $question = substr($q, 12, $pos + 4 - 12);
    my $name = lc join '.', @labels;
    if (open my $log, '>>', $self->{queries}) {
        print $log "$name $type\n";
    }
    my $addr = $self->_names->{$name};
    my $rd = $flags & 0x0100;
    if (!defined $addr) {
        return pack('n n n n n n', $id, 0x8003 | $rd | 0x0080, 1, 0, 0, 0) . $question;
    }
    my @answers;
    if ($type == 1) {
        push @answers, pack('n n n N n', 0xC00C, 1, 1, 1, 4)
            . pack('C4', split /\./, $addr);
    }
    return pack('n n n n n n', $id, 0x8000 | $rd | 0x0080, 1, scalar @answers, 0, 0)
        . $question . join '', @answers;
}

END { kill 'KILL', @PIDS if @PIDS }

1;
