#!/usr/bin/perl

# The shared-memory zone (docs/operations.md): one zone for all workers, updated
# atomically; LRU eviction of buckets when full (never of unexpired spent
# tokens: see pow_shield_zone_full.t), and a change of size on reload does
# not break anything.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Test::PowShield qw(:pow http_conf);

###############################################################################

my $t = Test::PowShield->new;

my $conf = http_conf(<<'EOF', workers => 4);
    pow_shield_secret "zone-suite-secret-0123456789abcdefgh";
    pow_shield_zone SIZE;

    server {
        %%TEST_SERVER%%

        location /api/ {
            pow_shield_limit 10 1h;
            pow_shield_difficulty 1;
            # This suite is about the limiter, not the circuit breaker.
            pow_shield_strikes off;
            pow_shield_key $http_x_client;
        }
    }
EOF

(my $small = $conf) =~ s/SIZE/32k/;
$t->write_file_expand('nginx.conf', $small);
$t->write_file('html/api/data.json', qq({"ok":true}\n));
$t->run;

###############################################################################

sub get {
    my ($client, %h) = @_;
    return $t->http_get('/api/data.json', 'X-Client' => $client, %h);
}

# run $n requests at once from forked clients; returns the statuses
sub parallel {
    my ($n, @req) = @_;
    my @pipes;
    for (1 .. $n) {
        pipe(my $rd, my $wr) or die "pipe: $!";
        my $pid = fork;
        die "fork: $!" unless defined $pid;
        if ($pid == 0) {
            close $rd;
            my $r = get(@req);
            print $wr $r->status // 'none';
            close $wr;
            POSIX::_exit(0);
        }
        close $wr;
        push @pipes, [$pid, $rd];
    }
    my @status;
    for (@pipes) {
        my ($pid, $rd) = @$_;
        local $/;
        push @status, scalar(<$rd>) // 'none';
        waitpid($pid, 0);
    }
    return @status;
}

sub count { my ($want, @s) = @_; scalar grep { $_ eq $want } @s }

# 40 concurrent requests of one client against limit 10, four workers:
# exactly 10 pass (no lost updates between workers)

my @s = parallel(40, 'burst');
is(count(200, @s), 10, '40 concurrent requests, limit 10: 10 pass');
is(count(429, @s), 30, '40 concurrent requests, limit 10: 30 are 429');

# one solution, 10 concurrent uses: exactly one passes

my $r = get('burst');
my %sol = solution($r);
@s = parallel(10, 'burst', %sol);
is(count(200, @s), 1, 'one solution used 10 times at once: 1 passes');
is(count(409, @s), 9, 'one solution used 10 times at once: 9 are 409');

# a full zone evicts old buckets, not spent tokens, and keeps answering

my @statuses;
for my $batch (0 .. 29) {
    for my $i (0 .. 99) {
        my $rs = $t->http_get('/api/data.json',
            'X-Client' => "flood-$batch-$i");
        push @statuses, $rs->status // 'none';
    }
}
is(scalar(grep { $_ ne '200' } @statuses), 0,
    '3000 new clients in a 32k zone: all served 200');

# premise: the zone was full, the least recently used bucket was given up
is(get('burst')->status, 200,
    'the flood evicted the oldest bucket (LRU, like limit_req)');

# (the flood may have evicted the bucket of "burst": over its limit again
# first; the token is bound to its client key)
get('burst') for 1 .. 10;
$r = get('burst', %sol);
is($r->status, 409, 'after the flood the spent token is still spent');

$r = get('fresh-after-flood');
is($r->status, 200, 'a new client after the flood: 200');
is($r->header('X-RateLimit-Remaining'), 9, 'a new client: fresh bucket');

# the zone size may change on reload

(my $bigger = $conf) =~ s/SIZE/256k/;
$t->write_file_expand('nginx.conf', $bigger);
ok($t->reload, 'reload with a different zone size');
$r = get('after-resize');
is($r->status, 200, 'after resizing: requests pass');
is($r->header('X-RateLimit-Remaining'), 9, 'after resizing: counted');

###############################################################################

$t->done_testing;
