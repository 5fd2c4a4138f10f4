#!/usr/bin/perl

# The limiter under concurrency, in local mode (the zone, shared by the
# node's workers) and in cluster mode (the sliding-window log in Redis,
# updated by one atomic script; two nodes): many simultaneous requests of
# one client on several workers (of several nodes) admit exactly the
# limit; in Redis, sorted-set members are unique even for requests in the
# same millisecond, and a burst right after SCRIPT FLUSH is still exact; a
# solution presented many times at once (on both nodes) admits exactly one
# request.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Test::PowShield qw(:pow :util :redis);
use Test::PowShield::Modes;
use Test::PowShield::Response;

###############################################################################

my $conf = http_conf(<<'EOF', workers => 2);
    pow_shield_secret "cluster-concurrency-secret-0123456789";
    %%REDIS%%

    server {
        # reuseport: the kernel spreads connections over both workers
        listen 127.0.0.1:%%PORT_8080%% reuseport;
        server_name localhost;

        root %%TESTDIR%%/html;

        add_header X-Worker $pid always;

        location /api/ {
            pow_shield_limit 20 1h;
            pow_shield_difficulty 1;
            # This suite is about the limiter, not the circuit breaker.
            pow_shield_strikes off;
            pow_shield_key $http_x_client;
        }
    }
EOF

###############################################################################

# Send every request at once (at_once). Each entry of @reqs is
# [node, %headers] (-uri => path, /api/data.json by default). Returns the
# responses in order.
sub burst {
    return at_once(map {
        my ($t, %h) = @$_;
        my $uri = delete $h{-uri} // '/api/data.json';
        my $req = "GET $uri HTTP/1.0\r\nHost: localhost\r\n";
        $req .= "$_: $h{$_}\r\n" for sort keys %h;
        [$t, "$req\r\n"];
    } @_);
}

sub count {
    my ($want, @rs) = @_;
    return scalar grep { ($_->status // 'none') eq $want } @rs;
}

sub wkey { client_key($_[0], 'w', 20, 3600000) }

Test::PowShield::Modes->each_mode($conf, nodes => 2, redis => 'timeout=2s',
    files => { 'html/api/data.json' => qq({"ok":true}\n) }, sub {
    my ($m) = @_;
    # in local mode both are the one node
    my ($n1, $n2) = ($m->node(1), $m->node(2));
    my $redis = $m->redis;

    # 60 simultaneous requests of one client (30 per node in cluster mode),
    # limit 20: exactly 20 pass, on whichever worker

    for my $round (1 .. 3) {
        my $client = "burst$round";
        my @rs = burst(map { [$_ % 2 ? $n1 : $n2, 'X-Client' => $client] } 1 .. 60);
        is(count(200, @rs), 20, "round $round: 60 concurrent, limit 20: 20 pass")
            or diag(statuses(@rs));
        is(count(429, @rs), 40, "round $round: the other 40 are 429");
        is($redis->cmd('ZCARD', wkey($client)), 20,
            "round $round: 20 unique members in the sorted set") if $m->cluster;
        my %workers = map { ($_->header('X-Worker') // '') => 1 } @rs;
        delete $workers{''};
        # local mode: the one node's 2 workers; cluster mode: 2 nodes' 4
        my $spread = $m->cluster ? 3 : 2;
        ok(keys(%workers) >= $spread,
            "round $round: (premise) answered by several workers"
            . ($m->cluster ? ' of both nodes' : ''))
            or diag(join ' ', sort keys %workers);

        my @remaining = sort { $a <=> $b }
            map { $_->header('X-RateLimit-Remaining') }
            grep { ($_->status // 0) == 200 } @rs;
        is("@remaining", join(' ', 0 .. 19),
            "round $round: each admitted request saw its own Remaining (0..19)");
    }

    # many clients at once do not disturb each other: 3 clients x 20 requests,
    # limit 20 each: all pass

    {
        my @reqs;
        for my $c (qw(c1 c2 c3)) {
            push @reqs, map { [$_ % 2 ? $n1 : $n2, 'X-Client' => $c] } 1 .. 20;
        }
        my @rs = burst(@reqs);
        is(count(200, @rs), 60, '3 clients x 20 concurrent, limit 20 each: all pass')
            or diag(statuses(@rs));
        is(join(' ', map { $redis->cmd('ZCARD', wkey($_)) } qw(c1 c2 c3)),
            '20 20 20', '... 20 entries each in Redis') if $m->cluster;
    }

    # right after SCRIPT FLUSH: every EVALSHA of the burst gets NOSCRIPT and is
    # resent as EVAL; still exactly the limit

    if ($m->cluster) {
        is($redis->cmd('SCRIPT', 'FLUSH'), 'OK', 'SCRIPT FLUSH');
        my @rs = burst(map { [$_ % 2 ? $n1 : $n2, 'X-Client' => 'flushed'] } 1 .. 60);
        is(count(200, @rs), 20, 'after SCRIPT FLUSH, 60 concurrent: 20 pass')
            or diag(statuses(@rs));
        is(count(429, @rs), 40, '... 40 are 429');
        is($redis->cmd('ZCARD', wkey('flushed')), 20, '... 20 entries');
    }

    # one solution presented 10 times at once (5 per node in cluster mode):
    # exactly one passes

    {
        my $r = $n1->http_get('/api/data.json', 'X-Client' => 'burst1');
        is($r->status, 429, 'over the limit: 429 with a challenge');
        my %h = ('X-Client' => 'burst1', solution($r));
        my @rs = burst(map { [$_ % 2 ? $n1 : $n2, %h] } 1 .. 10);
        is(count(200, @rs), 1, 'one solution, 10 concurrent uses'
            . ($m->cluster ? ' on 2 nodes' : '') . ': 1 passes')
            or diag(statuses(@rs));
        is(count(409, @rs), 9, '... 9 are 409');
    }

    # a big burst on a single worker: 600 requests at once, limit 250 (in
    # cluster mode hundreds of pipelined commands and replies on one
    # connection)

    {
        my $big = Test::PowShield->new;
        $big->use_redis($redis) if $m->cluster;
        (my $bconf = $conf) =~ s/worker_processes 2;/worker_processes 1;/;
        $bconf =~ s/events \{\n\}/events {\n    worker_connections 2048;\n}/;
        $bconf =~ s/pow_shield_limit 20 1h;/pow_shield_limit 250 1h;/;
        $big->write_file_expand('nginx.conf', $m->conf($bconf));
        $big->write_file('html/api/data.json', qq({"ok":true}\n));
        $big->run;

        my @rs = burst(map { [$big, 'X-Client' => 'big'] } 1 .. 600);
        is(count(200, @rs), 250, 'one worker, 600 concurrent, limit 250: 250 pass')
            or diag(join ' ', map { "$_:" . count($_, @rs) } qw(200 429 none 500 503));
        is(count(429, @rs), 350, '... 350 are 429');
        if ($m->cluster) {
            is($redis->cmd('ZCARD', client_key('big', 'w', 250, 3600000)),
                250, '... 250 entries in Redis');
            is($big->redis_unavailable_count,
                0, '... Redis never looked unavailable');
        }
        $big->stop;
    }
});

###############################################################################

Test::PowShield::Modes->done_testing;
