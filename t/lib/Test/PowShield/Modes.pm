package Test::PowShield::Modes;

# One suite, both modes: a behaviour that holds in local mode (state in
# the node's shared-memory zone) and in cluster mode (state in Redis) is
# asserted against a local-mode nginx and against cluster-mode nginx nodes
# sharing one Redis, from one configuration that differs only by its
# pow_shield_redis line.  The one entry is each_mode: it runs the suite's
# body once per mode, each mode with nginx of its own.
#
#   use Test::PowShield::Modes;
#
#   my @modes = Test::PowShield::Modes->each_mode($conf, nodes => 2,
#       redis => 'timeout=3s', files => { 'html/api/data.json' => '{}' },
#       sub {
#           my ($m) = @_;
#           my $r = $m->node(1)->http_get('/api/data.json');    # request 1
#           $m->node(2)->http_get(...);  # the other node (the same in local)
#           is($r->status, 200, 'under the limit');   # "local: under the limit"
#           is($m->redis->cmd('GET', $key), 1, '...') if $m->cluster;
#           is($r->header('X-Strikes'), $m->cluster ? 1 : 0,
#               'strikes: ...');    # a per-mode expectation, with a comment why
#           $m->node(1)->write_file_expand('nginx.conf', $m->conf($other_conf));
#       });
#   # @modes: after their bodies (nginx stopped), e.g. to compare them
#   Test::PowShield::Modes->done_testing;
#
# Cluster mode needs redis-server (Test::PowShield::Redis->available):
# without it, only local mode runs (said with a diag).

use strict;
use warnings;

use Carp qw(croak);
use Test::More ();
use Test2::API ();
use Test::PowShield;
use Test::PowShield::Redis;

use overload '""' => sub { $_[0]{name} }, fallback => 1;

# Test::PowShield::Modes->each_mode($conf, %opts, sub { my ($m) = @_; ... }):
# for local mode, then cluster mode: its nodes written and started, the
# body run with the mode, its nodes (and Redis) stopped.  Returns the modes.
#   $conf             nginx.conf; its %%REDIS%% is nothing in local mode, in
#                     cluster mode "pow_shield_redis
#                     redis://127.0.0.1:%%REDIS_PORT%% <redis>;"
#   nodes => n        cluster mode's nginx nodes on the one Redis (1);
#                     local mode has one
#   redis => '...'    what follows the URL on that line ('')
#   files => { name => content }   written into every node's directory
# Every test the body runs is named after its mode: "local: <name>",
# "cluster: <name>" (a name that already starts so is kept as it is).
sub each_mode {
    my ($class, $conf, @rest) = @_;
    my $body = pop @rest;
    croak "each_mode: the body (a code reference) comes last"
        unless ref $body eq 'CODE';
    my %o = @rest;
    croak "%%REDIS%% missing from the configuration" unless $conf =~ /%%REDIS%%/;

    my @modes;
    for my $name (qw(local cluster)) {
        if ($name eq 'cluster' && !Test::PowShield::Redis->available) {
            Test::More::diag('redis-server not found: cluster mode skipped');
            last;
        }
        my $m = $name eq 'local'
            ? $class->_mode('local', $conf, '', [Test::PowShield->new], %o)
            : $class->_mode('cluster', $conf, _line(%o), _nodes(%o), %o);
        push @modes, $m;
        $m->_named(sub { $body->($m) });
        $m->stop;
    }
    return @modes;
}

# Runs $code with every test it reports (at this level, not inside a
# subtest) named "<mode>: <name>".
sub _named {
    my ($self, $code) = @_;
    my $hub = Test2::API::test2_stack()->top;
    my $prefix = "$self->{name}: ";
    my $filter = $hub->filter(sub {
        my ($h, $e) = @_;
        if ($e->isa('Test2::Event::Ok')) {
            my $n = $e->name // '';
            $e->set_name($prefix . $n) unless index($n, $prefix) == 0;
        }
        return $e;
    }, inherit => 0);
    my $ok = eval { $code->(); 1 };
    my $err = $@;
    $hub->unfilter($filter);
    die $err unless $ok;
}

# Stops the mode's nginx nodes and its Redis (their logs stay to read and
# are checked by done_testing).
sub stop {
    my ($self) = @_;
    $_->stop for @{$self->{nodes}};
    $self->{nodes}[0]->stop_redis if $self->cluster;
    return $self;
}

# Test::PowShield::Modes->cluster_only($conf, %opts): cluster mode alone, for
# what only cluster mode has (skip_all without redis-server): the nodes on
# one Redis (run by the first), started.  $conf names that Redis with
# %%REDIS_PORT%% on a pow_shield_redis line of its own (or with %%REDIS%%);
# the options are each_mode()'s.
sub cluster_only {
    my ($class, $conf, %o) = @_;
    Test::PowShield->require_redis;
    return $class->_mode('cluster', $conf, _line(%o), _nodes(%o), %o);
}

# cluster mode's pow_shield_redis line
sub _line {
    my (%o) = @_;
    return 'pow_shield_redis redis://127.0.0.1:%%REDIS_PORT%%'
        . (length($o{redis} // '') ? " $o{redis}" : '') . ';';
}

# cluster mode's nodes: the first runs the Redis they share
sub _nodes {
    my (%o) = @_;
    my @nodes = map { Test::PowShield->new } 1 .. ($o{nodes} // 1);
    my $redis = $nodes[0]->run_redis;
    $_->use_redis($redis) for @nodes[1 .. $#nodes];
    return \@nodes;
}

sub _mode {
    my ($class, $name, $conf, $line, $nodes, %o) = @_;
    my $self = bless { name => $name, nodes => $nodes, line => $line }, $class;
    for my $t (@$nodes) {
        $t->write_file_expand('nginx.conf', $self->conf($conf));
        $t->write_file($_, $o{files}{$_}) for sort keys %{$o{files} || {}};
        $t->run;
    }
    return $self;
}

# conf($conf): a configuration as this mode runs it (its %%REDIS%% line),
# e.g. for a reload: $t->write_file_expand('nginx.conf', $m->conf($new)).
sub conf {
    my ($self, $conf) = @_;
    (my $c = $conf) =~ s/%%REDIS%%/$self->{line}/g;
    return $c;
}

sub name    { $_[0]{name} }
sub cluster { $_[0]{name} eq 'cluster' }
sub nodes   { @{$_[0]{nodes}} }

# node($i): the node that takes request $i (1, 2, ...) of a series: each
# node in turn, so in cluster mode with two nodes the odd ones go to the
# first node and the even ones to the second; in local mode always the one.
sub node {
    my ($self, $i) = @_;
    my $n = $self->{nodes};
    return $n->[(($i // 1) - 1) % @$n];
}

# The Test::PowShield::Redis the cluster nodes share; undef in local mode.
sub redis { $_[0]->cluster ? $_[0]{nodes}[0]->redis : undef }

# Stops every instance of the test file, checks their logs (a test each),
# then done_testing.  Test::PowShield::Modes->done_testing or $mode->done_testing.
sub done_testing {
    my (undef, @args) = @_;
    Test::PowShield::finish_all(1);
    Test::More::done_testing(@args);
}

1;
