#!/usr/bin/perl

# nginx stops and reloads at once whatever state Redis is in (SPEC 6;
# docs/operations.md, "Choosing a fail policy"): no timer of the module
# holds an exiting worker while Redis cannot answer.  A worker gives up the
# strikes it could not send to a dead Redis (logged with their count)
# instead of waiting for it, and a connection that only waits for its
# handshake, or for nginx's resolver, does not hold the worker either.  Each bound is generous: a
# worker that waited for Redis took 5 to 10 s.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use IO::Socket::INET;
use Time::HiRes;
use Test::More;
use Test::PowShield qw(:pow :util :redis);
use Test::PowShield::Modes;

###############################################################################

my $conf = http_conf(<<'EOF', workers => 2);
    pow_shield_secret "cluster-exit-redis-down-secret-01234";
    pow_shield_redis redis://127.0.0.1:%%REDIS_PORT%% timeout=100ms;

    server {
        %%TEST_SERVER%%

        pow_shield_key $http_x_client;
        pow_shield_difficulty 1;

        # the issue's location (37 point 8)
        location = /open {
            pow_shield_limit 3 1m;
            pow_shield_fail open;
        }

        # every 429 is a strike the node sends Redis in a batch
        location /local/ {
            pow_shield_limit 3 1m;
            pow_shield_strikes 1000 1h;
            pow_shield_fail local;
        }
    }
EOF

my %files = ('html/open' => qq({"ok":true}\n), 'html/local/data.json' => qq({"ok":true}\n));

# Seconds from QUIT until the master is gone.
sub quit_takes {
    my ($t) = @_;
    my $t0 = Time::HiRes::time();
    $t->stop;
    return (Time::HiRes::time() - $t0, $t->stopped_gracefully);
}

# Strikes waiting for Redis on the node when Redis dies: the client is
# refused on the node while Redis is frozen (the batch times out), then
# Redis is killed.
sub strikes_waiting_for_a_dead_redis {
    my ($t, $client) = @_;
    my @r = map { $t->http_get('/local/data.json', 'X-Client' => $client) } 1 .. 4;
    is(statuses(@r), '200 200 200 429', "premise: $client refused by Redis");
    $t->pause_redis;
    @r = map { $t->http_get('/local/data.json', 'X-Client' => $client) } 1 .. 6;
    like(statuses(@r), qr/429/, "premise: $client refused on the node while Redis is frozen");
    Time::HiRes::sleep(0.5);    # the batches time out: Redis is down
    $t->kill_redis;
}

###############################################################################

# The issue's run: a client refused once, Redis killed, 10 more requests

{
    my ($t) = Test::PowShield::Modes->cluster_only($conf, files => \%files)->nodes;
    $t->http_get('/open', 'X-Client' => 'issue') for 1 .. 4;
    $t->kill_redis;
    $t->http_get('/open', 'X-Client' => 'issue') for 1 .. 10;
    my ($secs, $graceful) = quit_takes($t);
    ok($graceful && $secs < 1,
        sprintf('nginx with a dead Redis exits within 1 s of QUIT (%.1f s)', $secs));
}

# Strikes the node could not send: given up at once, logged

{
    my ($t) = Test::PowShield::Modes->cluster_only($conf, files => \%files)->nodes;
    strikes_waiting_for_a_dead_redis($t, 'reload');
    my @old = $t->worker_pids;
    kill 'HUP', $t->master_pid;
    my $t0 = Time::HiRes::time();
    my %old = map { $_ => 1 } @old;
    ok(eventually(10, sub { !grep { $old{$_} } $t->worker_pids }), 'reload: the old workers exit');
    my $secs = Time::HiRes::time() - $t0;
    ok($secs < 2, sprintf('reload with a dead Redis: no old worker left after 2 s (%.1f s)', $secs));
    ok($t->error_log_count(qr/redis did not take \d+ refusals counted by this worker/) >= 1,
        'the strikes given up are logged with their count');

    $t->restart_redis;
    ok(eventually(10, sub {
            $t->http_get('/local/data.json', 'X-Client' => 'back');
            $t->redis_cmd('EXISTS', client_key('back', 'w', 3, 60000)) }),
        'premise: Redis back, the new workers use it');
    strikes_waiting_for_a_dead_redis($t, 'quit');
    my ($quit, $graceful) = quit_takes($t);
    ok($graceful && $quit < 1,
        sprintf('strikes waiting for a dead Redis: nginx exits within 1 s of QUIT (%.1f s)', $quit));
}

# A Redis that accepts connections and never answers the handshake
# (timeout=5s: the handshake would hold the worker for 5.1 s)

{
    my $t = Test::PowShield->new;
    my $listener = IO::Socket::INET->new(LocalAddr => '127.0.0.1',
        LocalPort => $t->port(6390), Listen => 1024, ReuseAddr => 1,
        Proto => 'tcp') or die "listen: $!";
    (my $hole = $conf) =~ s/%%REDIS_PORT%% timeout=100ms/%%PORT_6390%% timeout=5s/;
    $t->write_file_expand('nginx.conf', $hole);
    $t->write_file($_, $files{$_}) for keys %files;
    $t->run;
    $listener->blocking(0);
    my @held;    # accepted, never answered
    ok(eventually(5, sub { my $c = $listener->accept; push @held, $c if $c; @held >= 2 }),
        'premise: both workers connected to a Redis that never answers');
    my ($secs, $graceful) = quit_takes($t);
    ok($graceful && $secs < 1,
        sprintf('a handshake Redis never answers: nginx exits within 1 s of QUIT (%.1f s)', $secs));
    close $listener;
}

# A host name the resolver never answers for (resolver_timeout 5s: the
# lookup would hold the worker for 5 s)

{
    my $t = Test::PowShield->new;
    my $dns = IO::Socket::INET->new(LocalAddr => '127.0.0.1',
        LocalPort => $t->port(5353), Proto => 'udp') or die "dns: $!";
    (my $silent = $conf) =~ s{pow_shield_redis redis://127.0.0.1:%%REDIS_PORT%%}
        {resolver 127.0.0.1:%%PORT_5353%% ipv6=off;
    resolver_timeout 5s;
    pow_shield_redis redis://redis.test:%%PORT_6391%%};
    $t->write_file_expand('nginx.conf', $silent);
    $t->write_file($_, $files{$_}) for keys %files;
    $t->run;
    my $rin = '';
    vec($rin, fileno($dns), 1) = 1;
    ok(select(my $rout = $rin, undef, undef, 5), 'premise: the workers asked the resolver');
    my ($secs, $graceful) = quit_takes($t);
    ok($graceful && $secs < 1,
        sprintf('a name the resolver never answers: nginx exits within 1 s of QUIT (%.1f s)', $secs));
    close $dns;
}

###############################################################################

Test::PowShield::Modes->done_testing;
