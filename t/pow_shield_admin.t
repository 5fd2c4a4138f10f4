#!/usr/bin/perl

# pow_shield_admin (docs/operations.md, "Seeing and lifting a block"): GET
# ?key= answers a client's counts, strikes, block and ban as JSON (the
# node's zone, and Redis's in cluster mode); DELETE ?key= lifts its block
# and ban and clears its strikes, so that it gets 200/429 (not 403) at
# once, on this node and, in cluster mode, on another node of the same
# Redis within a second; a bad key is 400, another method 405 with Allow;
# access is nginx's allow/deny (the docs' example, run as it is written);
# the CLI's "pow-shield admin <url> show|lift <key>".
# In local mode and in cluster mode with two nodes (Test::PowShield::Modes).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Time::HiRes qw(sleep);
use Test::PowShield qw(:pow :util);
use Test::PowShield::Modes;

###############################################################################

my $cli = $ENV{TEST_POW_SHIELD_CLI} // "$Test::PowShield::REPO/objs/pow-shield";

# The docs' admin location, as it is written there.
my $ops = do {
    open my $fh, '<', "$Test::PowShield::REPO/docs/operations.md" or die "operations.md: $!";
    local $/;
    <$fh>;
};
my ($snippet) = $ops =~ /## Seeing and lifting a block.*?```nginx\n(.*?)```/s;
like($snippet // '', qr/pow_shield_admin;.*allow 127\.0\.0\.1;.*deny  all;/s,
    'the docs show an admin location with allow and deny');

my $t;    # the node under test (each_mode below)

my $conf = http_conf(<<"EOF");
    %%REDIS%%
    pow_shield_secret "admin-suite-secret-0123456789abcdef";
    pow_shield_difficulty 1;
    pow_shield_strikes 2 1h;

    set_real_ip_from 127.0.0.1;
    real_ip_header X-Real-IP;

    map \$http_x_api_key \$pow_key {
        default     \$pow_shield_client;
        "k-1041"    api:1041;
    }

    server {
        %%TEST_SERVER%%

        location /api/ {
            pow_shield_limit 1 1h;
        }

        location /ban/ {
            pow_shield_limit 1 2h;
            pow_shield_ban 1h after=1;
        }

        location /approx/ {
            pow_shield_limit 3 4h approx;
        }

        location /keyed/ {
            pow_shield_limit 1 3h;
            pow_shield_key \$pow_key;
        }

$snippet
    }
EOF

my %files = map { ("html/$_/data.json" => qq({"dir":"$_"}\n)) } qw(api ban keyed approx);

sub get {
    my ($node, $ip, $dir, %h) = @_;
    return $node->http_get("/$dir/data.json", 'X-Real-IP' => $ip, %h);
}

sub admin {
    my ($node, $method, $query, %h) = @_;
    my $port = $node->port(8080);
    my $extra = join '', map { "$_: $h{$_}\r\n" } sort keys %h;
    return $node->http("$method /pow-shield/admin$query HTTP/1.1\r\nHost: localhost\r\n"
        . "${extra}Content-Length: 0\r\nConnection: close\r\n\r\n");
}

sub show { admin($_[0], 'GET', "?key=$_[1]")->json }

# The store that holds the client's breaker in this mode.
sub held {
    my ($m, $view) = @_;
    return $m->cluster ? $view->{redis} : $view->{node};
}

sub cli {
    my ($node, @args) = @_;
    my $url = 'http://127.0.0.1:' . $node->port(8080) . '/pow-shield/admin';
    my $out = $node->path('cli.out');
    my $pid = fork // die "fork: $!";
    if (!$pid) {
        open STDOUT, '>', $out or die "$out: $!";
        open STDERR, '>', '/dev/null';
        exec $cli, 'admin', $url, @args;
        exit 127;
    }
    waitpid($pid, 0);
    return ($? >> 8, $node->read_file('cli.out'));
}

###############################################################################

Test::PowShield::Modes->each_mode($conf, nodes => 2, redis => 'timeout=3s', files => \%files, sub {
    my ($m) = @_;
    $t = $m->node(1);

    # refusals

    my $r = admin($t, 'GET', '');
    is($r->status, 400, 'no key: 400');
    is($r->json->{error}, 'missing key: ?key=<client key>', '... saying what is missing');
    is(admin($t, 'GET', '?key=%zz')->status, 400, 'a badly encoded key: 400');
    $r = admin($t, 'POST', '?key=192.0.2.7');
    is($r->status, 405, 'POST: 405');
    is($r->header('Allow'), 'GET, HEAD, DELETE', '... with Allow');
    is(admin($t, 'GET', '?key=192.0.2.7', 'X-Real-IP' => '192.0.2.99')->status, 403,
        'the docs\' deny all: another address gets 403');

    # a blocked client: seen, lifted, and served at once

    is(statuses(map { get($t, '192.0.2.7', 'api') } 1 .. 4), '200 429 429 403',
        'premise: two 429s open the breaker (2 strikes), the next is blocked');
    my $view = show($t, '192.0.2.7');
    is($view->{key}, '192.0.2.7', 'show: the key');
    is($view->{as}, 'address', 'show: an address names the default key\'s client');
    is($view->{mode}, $m->cluster ? 'cluster' : 'local', 'show: the mode');
    is(held($m, $view)->{block}, 'blocked', 'show: blocked');
    is(held($m, $view)->{strikes}, 2, 'show: its 2 strikes');
    cmp_ok(held($m, $view)->{block_ends_in_ms}, '>', 3_000_000, 'show: until the block ends (1h)');
    my ($api) = grep { $_->{window_ms} == 3_600_000 } @{held($m, $view)->{limits}};
    is($api->{count} // -1, 1, 'show: its count under /api/\'s limit (1 admitted)');
    ok(exists $view->{redis}, 'show: Redis\'s view in cluster mode') if $m->cluster;
    ok(!exists $view->{redis}, 'show: no Redis in local mode') unless $m->cluster;

    # Redis names the client's keys by its readable tag (the docs'
    # redis-cli example, run as it is written, on this Redis)
    if ($m->cluster) {
        my ($cmd, $shown) = $ops =~ /^\$ (redis-cli --scan --pattern '[^']*')\n(.*?)```/ms;
        is($cmd, q{redis-cli --scan --pattern 'pow:{@192.0.2.7}:*'},
            'the docs show the default key of 192.0.2.7 as pow:{@192.0.2.7}');
        my $port = $m->redis->port;
        my @scanned = sort split /\n/, `$cmd -p $port`;
        is("@scanned", join(' ', sort split /\n/, $shown // ''),
            "redis-cli --scan: the blocked client's keys, as the docs show them (@scanned)");
    }

    $r = admin($t, 'DELETE', '?key=192.0.2.7');
    is($r->status, 200, 'lift: 200');
    is($r->json->{lifted}{node}, JSON::PP::true, 'lift: lifted on the node');
    is($r->json->{lifted}{redis}, JSON::PP::true, 'lift: and in Redis') if $m->cluster;
    is($m->redis->cmd('EXISTS', map { "pow:{\@192.0.2.7}:$_" } qw(s t u c)), 0,
        'lift: its strikes, trips, unpaid strikes and paid spends deleted from Redis')
        if $m->cluster;
    is(get($t, '192.0.2.7', 'api')->status, 429,
        'lifted: over its limit, the client is challenged at once, not blocked');
    $view = show($t, '192.0.2.7');
    is(held($m, $view)->{block}, 'clear', 'show after the lift: clear');
    is(held($m, $view)->{strikes}, 1, 'show after the lift: only the new 429\'s strike');

    # the count under an approximate limit (cluster mode's counter)

    get($t, '192.0.2.12', 'approx') for 1 .. 2;
    my ($approx) = grep { $_->{window_ms} == 4 * 3_600_000 }
        @{held($m, show($t, '192.0.2.12'))->{limits}};
    is($approx->{count} // -1, 2, 'show: the count under an approx limit');
    is($approx->{approx}, JSON::PP::true, '... said to be approx');
    cmp_ok($approx->{reset_in_ms} // 0, '>', 0, '... and when it resets');

    # a ban, lifted (the CLI)

    is(statuses(map { get($t, '192.0.2.9', 'ban') } 1 .. 3), '200 429 429',
        'premise: two offences at /ban/ ban the client');
    is(get($t, '192.0.2.9', 'api')->status, 403, 'premise: banned at /api/ too');
    SKIP: {
        skip "no $cli (make build)", 5 unless -x $cli;
        my ($rc, $out) = cli($t, 'show', '192.0.2.9');
        is($rc, 0, 'CLI show: exit 0');
        is(held($m, json_decode($out))->{block}, 'banned', 'CLI show: banned');
        ($rc, $out) = cli($t, 'lift', '192.0.2.9');
        is($rc, 0, 'CLI lift: exit 0');
        like($out, qr/"lifted":\{"node":true/, 'CLI lift: prints the answer');
        is(get($t, '192.0.2.9', 'api')->status, 200, 'the lifted ban: served at /api/');
    }

    # a custom key (a map's value)

    is(statuses(map { get($t, '192.0.2.10', 'keyed', 'X-Api-Key' => 'k-1041') } 1 .. 4),
        '200 429 429 403', 'premise: api:1041 blocked');
    $view = show($t, 'api%3A1041');
    is($view->{as}, 'custom', 'show: a key of the operator\'s own');
    is(held($m, $view)->{block}, 'blocked', 'show: that key is blocked');
    admin($t, 'DELETE', '?key=api%3A1041');
    is(get($t, '192.0.2.11', 'keyed', 'X-Api-Key' => 'k-1041')->status, 429,
        'lifted: the key is challenged from any address');

    # two nodes on one Redis: lifted at A, served at B within a second

    return unless $m->cluster;
    my $b = $m->node(2);
    is(statuses(map { get($t, '192.0.2.8', 'api') } 1 .. 3), '200 429 429',
        'premise: blocked through node A');
    is(get($b, '192.0.2.8', 'api')->status, 403, 'premise: node B learnt the block');
    is(admin($t, 'DELETE', '?key=192.0.2.8')->status, 200, 'lifted at node A');
    # (B holds a block it learnt from Redis for at most 1 s before asking
    # again: about 10 tries 0.1 s apart; the bound leaves room for a slow
    # machine.)
    my ($tries, $status) = (0, 403);
    while ($status == 403 && $tries < 30) {
        $tries++;
        $status = get($b, '192.0.2.8', 'api')->status;
        sleep 0.1 if $status == 403;
    }
    is($status, 429, "node B: challenged again, no longer blocked (after $tries tries)");
});

###############################################################################

Test::PowShield::Modes->done_testing;
