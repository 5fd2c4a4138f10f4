#!/usr/bin/perl

# A burst is not an outage (docs/operations.md, "Choosing a fail policy"):
# 10 HTTP/2 connections x 128 streams, each connection in one write, while
# Redis is healthy but slow (stopped for a moment).  From 1280 clients,
# more commands wait than the cap per worker (1024; the first 64 new
# clients' checks go in four commands, cluster/node/gather.rs, so 1084
# requests wait): the requests beyond the cap are back-pressure, decided by the zone's limiter under every
# pow_shield_fail policy, so none passes uncounted and none gets a 5xx;
# pow_shield_redis_errors_total{kind="refused"} says how many there were.
# From one client, the requests coalesce (docs/operations.md, "What is
# decided where"): a few calls decide them all, in Redis, exactly the
# limit passes and no command is refused.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use IO::Select;
use IO::Socket::INET;
use Test::More;
use Test::PowShield qw(:pow :util);
use Test::PowShield::Metrics qw(scrape metric);
use Time::HiRes qw(sleep);

###############################################################################

my ($CONNS, $STREAMS, $CAP) = (10, 128, 1024);
my $BURST = $CONNS * $STREAMS;
# Requests held: the cap's commands, four of them for 64 gathered checks.
my $WAITING = $CAP - 4 + 64;

my $t = Test::PowShield->new->require_redis;
$t->run_redis;

$t->write_file_expand('nginx.conf', http_conf(<<'EOF', workers => 1));
    pow_shield_secret "cluster-burst-suite-secret-0123456789ab";
    # far beyond the test: the commands within the cap wait for Redis
    pow_shield_redis redis://127.0.0.1:%%REDIS_PORT%% timeout=60s;

    log_format burst '$uri $status $pow_shield_result';

    server {
        listen 127.0.0.1:%%PORT_8080%%;
        http2 on;
        server_name localhost;

        root %%TESTDIR%%/html;
        access_log %%TESTDIR%%/burst.log burst;

        pow_shield_strikes off;
        pow_shield_key $http_x_client;

        location /open/ {
            pow_shield_limit 50 1h;
            pow_shield_fail open;
        }

        location /closed/ {
            pow_shield_limit 40 1h;
            pow_shield_fail closed;
        }

        location = /metrics {
            pow_shield_status;
        }
    }
EOF
for my $dir (qw(open closed)) {
    $t->write_file("html/$dir/$_", '{"ok":true}') for qw(data.json warm.json);
}
$t->run;

###############################################################################

# HTTP/2 with prior knowledge, written by hand: the preface, SETTINGS with
# the largest stream window, a WINDOW_UPDATE for the connection, and
# $STREAMS HEADERS frames (GET, END_STREAM), all in one write.
sub frame {
    my ($type, $flags, $stream, $payload) = @_;
    my $len = length $payload;
    return pack('CnCCN', $len >> 16, $len & 0xffff, $type, $flags, $stream)
        . $payload;
}

sub literal { my ($s) = @_; chr(length $s) . $s }

sub burst_bytes {
    my ($path, $client) = @_;
    my $window = 0x7fffffff;
    my $out = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
    $out .= frame(0x4, 0, 0, pack('nN', 0x4, $window));    # SETTINGS
    $out .= frame(0x8, 0, 0, pack('N', $window - 65535));   # WINDOW_UPDATE
    for my $i (0 .. $STREAMS - 1) {
        # :method GET, :scheme http, :path and :authority literal, not indexed
        my $block = "\x82\x86" . "\x04" . literal($path)
            . "\x01" . literal('localhost')
            . "\x00" . literal('x-client') . literal($client->($i));
        $out .= frame(0x1, 0x5, 2 * $i + 1, $block);        # HEADERS
    }
    return $out;
}

sub log_lines {
    my ($dir) = @_;
    my $log = eval { $t->read_file('burst.log') } // '';
    return grep { m{^/$dir/data\.json } } split /\n/, $log;
}

# One burst at /$dir/ while Redis is stopped, from one client ($one) or
# one per request; returns the statuses nginx logged for it.
my $bursts = 0;
sub burst {
    my ($dir, $one) = @_;
    $bursts++;
    $t->pause_redis;
    my @socks = map {
        IO::Socket::INET->new(PeerAddr => '127.0.0.1:' . $t->port(8080))
            or die "connect: $!";
    } 1 .. $CONNS;
    my $conn = 0;
    for my $s (@socks) {
        $conn++;
        my $bytes = burst_bytes("/$dir/data.json",
            sub { $one // "b$bursts-$conn-$_[0]" });
        $s->blocking(1);
        $s->syswrite($bytes) == length $bytes or die "short write: $!";
        $s->blocking(0);
    }
    # The requests beyond the cap are answered before Redis resumes.
    if (!defined $one) {
        ok(eventually(20, sub {
            my $n = () = log_lines($dir);
            drain(@socks);
            $n >= $BURST - $WAITING;
        }), "$dir: the requests beyond the cap are answered while Redis is stopped");
    } else {
        Time::HiRes::sleep(0.5);
        drain(@socks);
    }
    $t->resume_redis;
    ok(eventually(30, sub {
        drain(@socks);
        (() = log_lines($dir)) >= $BURST;
    }), "$dir: all $BURST requests answered once Redis resumes");
    close $_ for @socks;
    my @lines = map { (split / /)[1] } log_lines($dir);
    truncate_log();
    return @lines;
}

sub truncate_log {
    open my $fh, '>', $t->testdir . '/burst.log' or die "truncate: $!";
    close $fh;
    # nginx keeps appending to the same (now empty) file
}

# Reads whatever the server sent (the responses are not parsed: nginx
# logged each request's status).
sub drain {
    my $sel = IO::Select->new(@_);
    for my $s ($sel->can_read(0.05)) {
        my $buf;
        1 while defined($s->sysread($buf, 65536)) && length $buf;
    }
}

sub count { my ($want, @s) = @_; scalar grep { $_ =~ $want } @s }

###############################################################################

is($t->http_get('/open/warm.json', 'X-Client' => 'one')->status, 200, 'Redis decides');
truncate_log();

# 1280 clients: the cap

my @open = burst('open');
is(scalar @open, $BURST, "fail open: $BURST requests logged");
is(count(qr/^200$/, @open), $BURST,
    'fail open: each client under its limit passes, whoever decided it');
is(count(qr/^5/, @open), 0, 'fail open: no 5xx');

my $m = scrape($t);
is(metric($m, 'pow_shield_redis_errors_total', kind => 'refused'), $BURST - $WAITING,
    'metrics: the requests beyond the cap are counted as refused');
my $buckets = metric($m, 'pow_shield_zone_entries', table => 'buckets') // 0;
ok($buckets >= $BURST - $WAITING,
    "fail open: the zone counted the requests beyond the cap ($buckets buckets)");

my @closed = burst('closed');
is(scalar @closed, $BURST, "fail closed: $BURST requests logged");
is(count(qr/^5/, @closed), 0, 'fail closed: no 503 for a busy Redis');

$m = scrape($t);
is(metric($m, 'pow_shield_redis_errors_total', kind => 'refused'), 2 * ($BURST - $WAITING),
    'metrics: refused again for the second burst');
is(metric($m, 'pow_shield_redis_fallback_active'), 0,
    'metrics: a busy Redis is not a fallback');

# one client: coalesced, decided in Redis

@open = burst('open', 'one');
is(scalar @open, $BURST, "one client: $BURST requests logged");
is(count(qr/^200$/, @open), 49, 'one client: exactly the limit passes (one used above)');
is(count(qr/^429$/, @open), $BURST - 49, 'one client: every other request is 429');
is(count(qr/^5/, @open), 0, 'one client: no 5xx');
$m = scrape($t);
is(metric($m, 'pow_shield_redis_errors_total', kind => 'refused'), 2 * ($BURST - $WAITING),
    'one client: no command refused (a few calls decided them all)');

###############################################################################

$t->done_testing;
