#!/usr/bin/perl

# pow_shield_status (docs/directives.md, docs/metrics.md): the location serves
# the counters of every worker, summed from the shared zone, in Prometheus
# text format; they survive "nginx -s reload".  Every shielded request is
# counted once by its $pow_shield_result, with what it set off (a challenge
# issued, a verification failed and why, a strike, a breaker trip, a ban, a
# trap hit).  The status location itself is never shielded; access to it is
# nginx's allow/deny; only GET and HEAD.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Test::PowShield qw(:pow http_conf);
use Test::PowShield::ConfigCases;
use Test::PowShield::Metrics qw(scrape metric delta promtool_check);

###############################################################################

my $SECRET = 'status-suite-secret-0123456789abcdef';
my $OTHER = 'some-other-secret-0123456789abcdefgh';

my $t = Test::PowShield->new;

# two workers: the counters are summed over both
$t->write_file_expand('nginx.conf', http_conf(<<"EOF", workers => 2));
    pow_shield_secret "$SECRET";
    pow_shield_zone 1m;

    server {
        # reuseport: the kernel spreads connections over both workers
        listen 127.0.0.1:%%PORT_8080%% reuseport;
        server_name localhost;

        root %%TESTDIR%%/html;

        add_header X-Pid \$pid always;
        add_header X-Result \$pow_shield_result always;

        pow_shield_key \$http_x_client;
        pow_shield_limit 1 1h;
        pow_shield_difficulty 1;

        location /api/ {
        }

        location /strict/ {
            pow_shield_strikes 2 1h;
        }

        location /ban/ {
            pow_shield_strikes 1 1h;
            pow_shield_ban 1h after=1;
        }

        location /trap/ {
            pow_shield_trap;
        }

        location /strict-trap/ {
            pow_shield_trap;
            pow_shield_strikes 2 1h;
        }

        location /plain/ {
            pow_shield_limit off;
        }

        location /exempt/ {
            pow_shield_key \$http_x_none;
        }

        location /dry/ {
            pow_shield_dry_run on;
        }

        # the server's pow_shield_limit does not apply here
        location = /metrics {
            pow_shield_status;
            allow 127.0.0.1;
            deny all;
        }

        location = /metrics-denied {
            pow_shield_status;
            deny all;
        }
    }
EOF

$t->write_file("html/$_/data.json", qq({"ok":true}\n))
    for qw(api strict ban exempt dry plain);

$t->run;

###############################################################################

my @RESULTS = qw(pass challenge solved invalid blocked banned trap exempt
    unavailable);

sub get {
    my ($uri, $client, %h) = @_;
    return $t->http_get($uri, ($client ? ('X-Client' => $client) : ()), %h);
}

sub requests_total {
    my ($m) = @_;
    my $n = 0;
    $n += metric($m, 'pow_shield_requests_total', result => $_) // 0
        for @RESULTS;
    return $n;
}

# step($name, $requests, { 'name|label=value' => delta }, sub { ... }):
# runs the requests; every listed sample grew by its delta, and the
# shielded requests were counted exactly once each
sub step {
    my ($name, $requests, $want, $run) = @_;
    my $before = scrape($t);
    $run->();
    my $after = scrape($t);
    for my $what (sort keys %$want) {
        my ($metric, @labels) = split /[|=]/, $what;
        is(delta($before, $after, $metric, @labels), $want->{$what},
            "$name: $what +$want->{$what}");
    }
    is(requests_total($after) - requests_total($before), $requests,
        "$name: $requests requests counted once each");
}

sub payload {
    my (%o) = @_;
    my %p = (ip => '127.0.0.1', ts => now_ms(), difficulty => 1,
        salt => join('', map { sprintf '%02x', int rand 256 } 1 .. 16));
    $p{$_} = $o{$_} for keys %o;
    return \%p;
}

# a fresh client over its limit (limit 1: its first request passes)
my $n = 0;
sub over {
    my $c = 'client-' . ++$n;
    my $r = get('/api/data.json', $c);
    die "first request of $c: " . ($r->status // 'none') . "\n"
        unless ($r->status // 0) == 200;
    return $c;
}

###############################################################################

# the endpoint

my $m = scrape($t);
my $r = $m->{-response};
is($r->header('Content-Type'), 'text/plain; version=0.0.4; charset=utf-8',
    'Content-Type: Prometheus text format 0.0.4');
for my $result (@RESULTS) {
    is(metric($m, 'pow_shield_requests_total', result => $result), 0,
        "result=\"$result\" is there from the start, at 0");
}
is(metric($m, 'pow_shield_zone_size_bytes'), 1048576,
    'zone size: pow_shield_zone 1m');
like($m->{-text}, qr/^pow_shield_info\{version="[^"]+"\} 1$/m,
    'pow_shield_info');

SKIP: {
    my ($rc, $out) = promtool_check($m->{-text});
    skip "promtool: $out", 1 unless defined $rc;
    ok($rc == 0 && $out !~ /\S/, 'promtool check metrics: no problems')
        or diag($out);
}

$r = $t->http_get('/metrics', -method => 'HEAD');
is($r->status, 200, 'HEAD: 200');
is($r->header('Content-Type'), 'text/plain; version=0.0.4; charset=utf-8',
    'HEAD: Content-Type');
is($r->body // '', '', 'HEAD: no body');

is($t->http_get('/metrics', -method => 'POST', -body => 'x')->status, 405,
    'POST: 405');
is($t->http_get('/metrics', -method => 'DELETE')->status, 405, 'DELETE: 405');

is($t->http_get('/metrics-denied')->status, 403, 'deny all: 403');

step('scrapes are not shielded', 0, {}, sub {
    my @s = map { $t->http_get('/metrics', 'X-Client' => 'scraper')->status }
        1 .. 3;
    is("@s", '200 200 200', 'the server limit of 1 does not apply to it');
});

###############################################################################

# the scripted sequence

step('green', 1, { 'pow_shield_requests_total|result=pass' => 1 }, sub {
    is(get('/api/data.json', 'green')->status, 200, 'green: 200');
});

my $challenge;
step('challenge', 2, {
    'pow_shield_requests_total|result=pass' => 1,
    'pow_shield_requests_total|result=challenge' => 1,
    'pow_shield_challenges_issued_total' => 1,
    'pow_shield_strikes_total' => 1,
}, sub {
    get('/api/data.json', 'yellow');
    $challenge = get('/api/data.json', 'yellow');
    is($challenge->status, 429, 'over the limit: 429');
});

step('solved', 1, {
    'pow_shield_requests_total|result=solved' => 1,
    'pow_shield_challenges_issued_total' => 0,
    'pow_shield_strikes_total' => 0,
}, sub {
    is(get('/api/data.json', 'yellow', solution($challenge))->status, 200,
        'a solution: 200');
});

# every row of docs/protocol.md section 7.2: [reason, status, headers the client sends]
my @rows = (
    [malformed => 400, sub { ('X-PoW-Nonce' => '1') }],
    [signature => 403, sub { ('X-PoW-Challenge' =>
        forge_token($OTHER, payload()), 'X-PoW-Nonce' => '1') }],
    [payload => 400, sub { ('X-PoW-Challenge' =>
        forge_token_raw($SECRET, 'not json'), 'X-PoW-Nonce' => '1') }],
    [ip => 403, sub { my $p = payload(ip => '10.9.8.7');
        ('X-PoW-Challenge' => forge_token($SECRET, $p),
            'X-PoW-Nonce' => solve($p->{salt}, 1)) }],
    [expired => 410, sub { my $p = payload(ts => now_ms() - 3_600_000);
        ('X-PoW-Challenge' => forge_token($SECRET, $p),
            'X-PoW-Nonce' => solve($p->{salt}, 1)) }],
    # (the client's own challenge, asked before the step: tokens are bound
    # to the client key)
    [solution => 422, sub { solution(get('/api/data.json', $_[0]), wrong => 1) }],
    # another key's token: 403 with a fresh challenge
    [binding => 403, sub { solution($challenge) }, 1],
);
for my $row (@rows) {
    my ($reason, $status, $headers, $fresh) = @$row;
    my $c = over();
    my @headers = $headers->($c);
    step("failed verification: $reason", 1, {
        'pow_shield_requests_total|result=invalid' => 1,
        "pow_shield_verifications_failed_total|reason=$reason" => 1,
        'pow_shield_challenges_issued_total' => ($fresh || $status >= 410) ? 1 : 0,
        'pow_shield_strikes_total' => 1,
    }, sub {
        is(get('/api/data.json', $c, @headers)->status, $status,
            "$reason: $status");
    });
}

step('failed verification: spent', 1, {
    'pow_shield_requests_total|result=invalid' => 1,
    'pow_shield_verifications_failed_total|reason=spent' => 1,
    'pow_shield_challenges_issued_total' => 1,
    'pow_shield_strikes_total' => 1,
}, sub {
    is(get('/api/data.json', 'yellow', solution($challenge))->status, 409,
        'the same solution again: 409');
});

step('blocked', 4, {
    'pow_shield_requests_total|result=pass' => 1,
    'pow_shield_requests_total|result=challenge' => 2,
    'pow_shield_requests_total|result=blocked' => 1,
    'pow_shield_strikes_total' => 2,
    'pow_shield_breaker_trips_total' => 1,
    'pow_shield_bans_total' => 0,
}, sub {
    my @s = map { get('/strict/data.json', 'breaker')->status } 1 .. 4;
    is("@s", '200 429 429 403', 'strikes 2: the 4th request is blocked');
});

step('banned', 3, {
    'pow_shield_requests_total|result=pass' => 1,
    'pow_shield_requests_total|result=challenge' => 1,
    'pow_shield_requests_total|result=banned' => 1,
    'pow_shield_strikes_total' => 1,
    'pow_shield_breaker_trips_total' => 1,
    'pow_shield_bans_total' => 1,
}, sub {
    my @s = map { get('/ban/data.json', 'banned')->status } 1 .. 3;
    is("@s", '200 429 403', 'ban after=1: the 3rd request is banned');
});

step('trap', 1, {
    'pow_shield_requests_total|result=trap' => 1,
    'pow_shield_trap_hits_total' => 1,
    'pow_shield_strikes_total' => 1,
}, sub {
    is(get('/trap/x', 'trapper')->status, 404, 'trap: 404');
});

step('a blocked client on the trap', 1, {
    'pow_shield_requests_total|result=blocked' => 1,
    'pow_shield_trap_hits_total' => 1,
    'pow_shield_strikes_total' => 0,
}, sub {
    is(get('/strict-trap/x', 'breaker')->status, 403, 'blocked: 403');
});

step('exempt', 2, { 'pow_shield_requests_total|result=exempt' => 2 }, sub {
    is(get('/exempt/data.json')->status, 200, 'empty key: 200') for 1 .. 2;
});

step('dry run', 2, {
    'pow_shield_requests_total|result=pass' => 1,
    'pow_shield_requests_total|result=challenge' => 1,
    'pow_shield_challenges_issued_total' => 0,
    'pow_shield_strikes_total' => 1,
}, sub {
    my @s = map { get('/dry/data.json', 'dry')->status } 1 .. 2;
    is("@s", '200 200', 'dry run: decided, not enforced');
});

step('unshielded locations are not counted', 0, {}, sub {
    get('/metrics-denied', 'plain');
    is(get('/plain/data.json', 'plain')->status, 200, 'pow_shield_limit off');
});

###############################################################################

# both workers count into the same totals

my %pids;
step('summed over the workers', 40,
    { 'pow_shield_requests_total|result=pass' => 40 }, sub {
    for my $i (1 .. 40) {
        my $r = get('/api/data.json', "spread-$i");
        $pids{$r->header('X-Pid') // ''}++;
    }
});
is(scalar(grep { /^\d+$/ } keys %pids), 2, 'both workers served requests')
    or diag(join ' ', %pids);

# the zone's tables

$m = scrape($t);
cmp_ok(metric($m, 'pow_shield_zone_entries', table => 'buckets'), '>=', 40,
    'zone: a bucket per client');
cmp_ok(metric($m, 'pow_shield_zone_entries', table => 'spent'), '>=', 1,
    'zone: the spent challenge');
cmp_ok(metric($m, 'pow_shield_zone_entries', table => 'strikes'), '>=', 5,
    'zone: the breakers');

# nginx -s reload: the zone is adopted, the counters kept

my $before = scrape($t);
ok($t->reload, 'reloaded');
my $after = scrape($t);
my @totals = sort grep { /_total/ } keys %$before;
is_deeply([map { $after->{$_} } @totals], [map { $before->{$_} } @totals],
    'every counter kept across the reload');
step('counting after the reload', 1,
    { 'pow_shield_requests_total|result=pass' => 1 }, sub {
    get('/api/data.json', 'after-reload');
});

###############################################################################

# unavailable: cluster mode, Redis down, pow_shield_fail closed

my $u = Test::PowShield->new;
$u->write_file_expand('nginx.conf', http_conf(<<"EOF", workers => 1));
    pow_shield_secret "$SECRET";
    # nothing listens there
    pow_shield_redis redis://127.0.0.1:%%PORT_8099%%;

    server {
        %%TEST_SERVER%%

        location /closed/ {
            pow_shield_limit 10 1h;
            pow_shield_fail closed;
        }

        location = /metrics {
            pow_shield_status;
        }
    }
EOF
$u->write_file('html/closed/data.json', qq({"ok":true}\n));
$u->run;

$before = scrape($u);
my @s = map { $u->http_get('/closed/data.json')->status } 1 .. 2;
is("@s", '503 503', 'fail closed, Redis down: 503');
$after = scrape($u);
is(delta($before, $after, 'pow_shield_requests_total', result => 'unavailable'),
    2, 'unavailable +2');
is(metric($after, 'pow_shield_redis_fallback_active'), 1,
    'the worker decides without Redis: fallback gauge 1');
cmp_ok(metric($after, 'pow_shield_redis_errors_total', kind => 'io'), '>=', 1,
    'the refused connection is an io error');

###############################################################################

# a status location added by a reload: the zone is adopted and gets its
# metrics slots; counting starts then (nothing was counted before)

my $a = Test::PowShield->new;
my $aconf = http_conf(<<"EOF");
    pow_shield_secret "$SECRET";

    server {
        %%TEST_SERVER%%

        location /api/ {
            pow_shield_limit 10 1h;
        }
STATUS
    }
EOF
(my $without = $aconf) =~ s/STATUS\n//;
(my $with = $aconf) =~ s/STATUS/        location = \/metrics {\n            pow_shield_status;\n        }/;
$a->write_file_expand('nginx.conf', $without);
$a->write_file('html/api/data.json', qq({"ok":true}\n));
$a->run;
is($a->http_get('/api/data.json')->status, 200, 'no status location: 200')
    for 1 .. 2;
$a->write_file_expand('nginx.conf', $with);
ok($a->reload, 'reloaded with a status location');
is($a->http_get('/api/data.json')->status, 200, 'after the reload: 200');
$m = scrape($a);
is(metric($m, 'pow_shield_requests_total', result => 'pass'), 1,
    'counting started with the status location');
is(metric($m, 'pow_shield_zone_entries', table => 'buckets'), 1,
    'the zone was adopted: the bucket made before the reload is there');

###############################################################################

# nginx -t

my $c = Test::PowShield->new;
my $cases = Test::PowShield::ConfigCases->new($c, http_conf(<<'EOF'));
HTTP
    server {
        %%TEST_SERVER%%
SERVER
        location / {
LOCATION
        }
    }
EOF

$cases->bad(location => 'pow_shield_status on;', undef,
    'status with an argument');
$cases->bad(http => 'pow_shield_status;', undef, 'status in http');
$cases->bad(server => 'pow_shield_status;', undef, 'status in server');
$cases->bad(location => "pow_shield_status;\n            pow_shield_status;",
    undef, 'status twice in a location');
$cases->good(location => 'pow_shield_status;', 'status in a location');
$cases->good(location => "pow_shield_status;\n            allow 127.0.0.1;\n"
    . "            deny all;", 'status with allow/deny');

$t->done_testing;
