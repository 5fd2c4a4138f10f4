#!/usr/bin/perl

# pow_shield_status scraped by a real Prometheus server (docs/metrics.md):
# the test starts Debian's prometheus on a free loopback port with a
# 1-second scrape interval and a temporary storage directory, and reads a
# counter back through its HTTP API (polling until the scrape happened).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use POSIX qw(WNOHANG);
use Test::More;
use Test::PowShield qw(:pow :util);

###############################################################################

my $PROMETHEUS = $ENV{TEST_PROMETHEUS} || 'prometheus';
plan(skip_all => "$PROMETHEUS not found; install the prometheus package"
    . " or set TEST_PROMETHEUS")
    unless grep { -x "$_/$PROMETHEUS" } split(/:/, $ENV{PATH} // ''),
        or -x $PROMETHEUS;

my $t = Test::PowShield->new;

$t->write_file_expand('nginx.conf', http_conf(<<'EOF'));
    pow_shield_secret "status-prometheus-suite-secret-0123456";

    server {
        %%TEST_SERVER%%

        location /api/ {
            pow_shield_key $http_x_client;
            pow_shield_limit 1 1h;
            pow_shield_difficulty 1;
        }

        location = /metrics {
            pow_shield_status;
            allow 127.0.0.1;
            deny all;
        }
    }
EOF

$t->write_file('html/api/data.json', qq({"ok":true}\n));
$t->run;

###############################################################################

my @s = map { $t->http_get('/api/data.json', 'X-Client' => 'c')->status }
    1 .. 4;
is("@s", '200 429 429 429', 'one pass, three challenges');

# Prometheus, scraping the status location every second

my $dir = $t->testdir . '/prometheus';
my $nginx = '127.0.0.1:' . $t->port(8080);
$t->write_file('prometheus/prometheus.yml', <<"EOF");
global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: pow_shield
    metrics_path: /metrics
    static_configs:
      - targets: ['$nginx']
EOF

# the port is taken before fork, so that the parent queries the same one
my $listen = "127.0.0.1:" . $t->port(9090);
my $pid = fork // die "fork: $!";
if ($pid == 0) {
    open STDOUT, '>', "$dir/prometheus.log";
    open STDERR, '>&', \*STDOUT;
    exec $PROMETHEUS, "--config.file=$dir/prometheus.yml",
        "--storage.tsdb.path=$dir/data",
        "--web.listen-address=$listen"
        or POSIX::_exit(127);
}
END {
    if ($pid) {
        kill 'TERM', $pid;
        waitpid($pid, 0);
    }
}

# the value of an instant query's first sample, or undef
sub query {
    my ($q) = @_;
    (my $e = $q) =~ s/([^A-Za-z0-9_.~-])/sprintf '%%%02X', ord $1/ge;
    my $r = $t->http_get("/api/v1/query?query=$e", -port => 9090,
        -timeout => 2);
    my $result = (($r->json || {})->{data} || {})->{result} || [];
    return @$result ? $result->[0]{value}[1] : undef;
}

my $challenge = 'pow_shield_requests_total{result="challenge",job="pow_shield"}';
ok(eventually(60, sub { (query($challenge) // -1) == 3 }),
    'Prometheus scraped it: requests_total{result="challenge"} is 3')
    or diag($t->read_file('prometheus/prometheus.log'));
is(query('up{job="pow_shield"}'), 1, 'the target is up');
is(query('pow_shield_requests_total{result="pass"}'), 1,
    'requests_total{result="pass"} is 1');
is(query('pow_shield_redis_fallback_active'), 0,
    'local mode: the fallback gauge is 0');

kill 'TERM', $pid;
my $stopped = eventually(20, sub { waitpid($pid, WNOHANG) == $pid });
ok($stopped, 'Prometheus stopped');
$pid = 0 if $stopped;

###############################################################################

$t->done_testing;
