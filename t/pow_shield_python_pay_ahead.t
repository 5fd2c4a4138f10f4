#!/usr/bin/perl

# The Python client pays ahead (issue 29, SPEC §4 "Paying ahead"): every
# entry point (Session, requests.get with a new RequestsAuth each time,
# HTTPAdapter, httpx sync and async) solves the X-PoW-Next-Challenge of an
# answer while it reads it and sends the solution with its next request.
# 1 + 30 requests to `pow_shield_limit 1 60s` are 31 entries in the access
# log: none 429, 30 solved. Where `pow_shield_pay_ahead off`, the same
# client takes the 429 path: 61 entries. With pace=True and a limit of 2
# per 2 s, the requests beyond the limit wait for the reset: none is 429 or
# solved. 12 requests at once (4 threads through one Session, a gather
# through httpx.AsyncClient; at most 4 in flight): at most 3 429s, then one
# round trip each. The README's "Paying ahead" and "Pacing" examples run as written
# against a second server (no client key header there: the address).
# Both modes (Test::PowShield::Modes).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Test::PowShield qw(:pow :util);
use Test::PowShield::Modes;
use Test::PowShield::Examples qw(readme_blocks);

###############################################################################

my $REPO = $Test::PowShield::REPO;
my $PY = $ENV{TEST_PYTHON} || '/usr/bin/python3';
plan(skip_all => "$PY not found (apt-get install python3)") unless -x $PY;

my %HAS = map { $_ => system($PY, '-c', "import $_") == 0 } qw(requests httpx);
my %NEEDS = (session => 'requests', 'requests-auth' => 'requests', adapter => 'requests',
    httpx => 'httpx', 'httpx-async' => 'httpx');
my @KINDS = qw(session requests-auth adapter httpx httpx-async);

my $conf = http_conf(<<'EOF');
    %%REDIS%%

    log_format ahead '$http_x_client $status $pow_shield_result';

    server {
        %%TEST_SERVER%%
        access_log %%TESTDIR%%/ahead.log ahead;

        pow_shield_key $http_x_client;

        location /paid/ {
            pow_shield_limit 1 60s;
            pow_shield_difficulty 12b;
        }

        location /off/ {
            pow_shield_limit 1 1m;
            pow_shield_difficulty 12b;
            pow_shield_pay_ahead off;
        }

        location /paced/ {
            pow_shield_limit 2 2s;
            pow_shield_difficulty 12b;
        }
    }

    # the README's examples: api.example.com, keyed by address
    server {
        listen 127.0.0.1:%%PORT_8081%%;
        root %%TESTDIR%%/html;
        access_log %%TESTDIR%%/readme.log ahead;

        location /items {
            pow_shield_limit 1 60s;
            pow_shield_difficulty 12b;
            try_files /paid/data.json =404;
        }

        location /feed {
            pow_shield_limit 2 2s;
            pow_shield_difficulty 12b;
            try_files /paid/data.json =404;
        }
    }
EOF

my %files = map { ("html/$_/data.json" => qq({"dir":"$_"}\n)) } qw(paid off paced);

my $client_py = <<'EOF';
# ahead.py KIND URL CLIENT COUNT OPTIONS_JSON: COUNT GETs in a row through
# one client of KIND (requests-auth: a new RequestsAuth for each); prints
# each one's status, or "raised <error> <status>". session-at-once: 4
# threads, COUNT / 4 each, through one Session; httpx-async-at-once: a
# gather of COUNT.
import asyncio, json, sys
import pow_shield

kind, url, client, count, options = sys.argv[1:6]
count, options, headers = int(count), json.loads(options), {"X-Client": client}

def run(get):
    for _ in range(count):
        try:
            print(get().status_code, flush=True)
        except pow_shield.PowShieldError as e:
            print("raised", type(e).__name__, getattr(e.response, "status_code", "-"), flush=True)

if kind == "session":
    with pow_shield.Session(**options) as s:
        run(lambda: s.get(url, headers=headers, timeout=10))
elif kind == "requests-auth":
    import requests
    run(lambda: requests.get(url, headers=headers, timeout=10, auth=pow_shield.RequestsAuth(**options)))
elif kind == "adapter":
    import requests
    with requests.Session() as s:
        s.mount("http://", pow_shield.HTTPAdapter(**options))
        run(lambda: s.get(url, headers=headers, timeout=10))
elif kind == "httpx":
    import httpx
    with httpx.Client(auth=pow_shield.HttpxAuth(**options), timeout=10) as c:
        run(lambda: c.get(url, headers=headers))
elif kind == "session-at-once":
    import threading
    statuses = []
    with pow_shield.Session(**options) as s:
        def some():
            for _ in range(count // 4):
                statuses.append(s.get(url, headers=headers, timeout=10).status_code)
        threads = [threading.Thread(target=some) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    print("\n".join(map(str, statuses)))
elif kind == "httpx-async-at-once":
    import httpx
    async def main():
        async with httpx.AsyncClient(auth=pow_shield.HttpxAuth(**options), timeout=10) as c:
            async def one():
                return (await c.get(url, headers=headers)).status_code
            for status in await asyncio.gather(*(one() for _ in range(count))):
                print(status, flush=True)
    asyncio.run(main())
elif kind == "httpx-async":
    import httpx
    async def main():
        async with httpx.AsyncClient(auth=pow_shield.HttpxAuth(**options), timeout=10) as c:
            for _ in range(count):
                try:
                    print((await c.get(url, headers=headers)).status_code, flush=True)
                except pow_shield.PowShieldError as e:
                    print("raised", type(e).__name__, getattr(e.response, "status_code", "-"), flush=True)
    asyncio.run(main())
EOF

###############################################################################

my $t;

# What the server logged for one client: "status result" per request.
sub seen {
    my ($client, $log) = @_;
    return map { /^\Q$client\E (\S+ \S+)$/ ? $1 : () } split /\n/, $t->read_file($log // 'ahead.log');
}

sub count_of { my ($what, @seen) = @_; scalar grep { $_ eq $what } @seen }

# python($kind, $uri, $client, $count, \%options) -> the statuses it printed
sub python {
    my ($kind, $uri, $client, $count, $options) = @_;
    my $url = 'http://127.0.0.1:' . $t->port(8080) . $uri;
    my ($rc, $out, $err) = $t->run_argv($PY, $t->path('ahead.py'), $kind, $url, $client, $count,
        json_encode($options || {}));
    diag("$kind: exit $rc: $err") if $rc != 0;
    return split /\n/, $out;
}

local $ENV{PYTHONPATH} = "$REPO/clients/python";

Test::PowShield::Modes->each_mode($conf, redis => 'timeout=3s', files => \%files, sub {
    my ($m) = @_;
    $t = $m->node(1);
    $t->write_file('ahead.py', $client_py);

    for my $kind (@KINDS) {
        SKIP: {
        skip("$NEEDS{$kind} not installed", 7) unless $HAS{$NEEDS{$kind}};

        # paying ahead: 1 + 30 requests, 31 round trips
        my @got = python($kind, '/paid/data.json', "$kind-ahead", 31);
        is(join(' ', @got), join(' ', (200) x 31), "$kind: 1 + 30 requests all end 200");
        my @seen = seen("$kind-ahead");
        is(scalar @seen, 31, "$kind: the access log has 31 entries for 31 requests");
        is(count_of('429 challenge', @seen), 0, "$kind: none of them is a 429");
        is(count_of('200 solved', @seen), 30, "$kind: 30 of them are solved")
            or diag(join ', ', @seen);

        # pow_shield_pay_ahead off: the 429 path, two round trips per paid request
        @got = python($kind, '/off/data.json', "$kind-off", 31);
        @seen = seen("$kind-off");
        is(scalar @seen, 61, "$kind: pay-ahead off: 61 entries (each paid request a 429 first)")
            or diag(join ', ', @seen);

        # pacing: 2 per 2 s, 4 requests; the 2 beyond the limit wait
        @got = python($kind, '/paced/data.json', "$kind-pace", 4, { pace => \1 });
        is(join(' ', @got), '200 200 200 200', "$kind: pace: 4 requests all end 200");
        @seen = seen("$kind-pace");
        is(join(', ', @seen), join(', ', ('200 pass') x 4),
            "$kind: pace: 4 entries, none 429 or solved: the client waited for the reset");
        }
    }

    # In flight (at most 4 per origin): the first ones take the 429 path,
    # then every request has a solution ahead, each used once
    for my $kind (qw(session httpx-async)) {
        SKIP: {
        skip("$NEEDS{$kind} not installed", 3) unless $HAS{$NEEDS{$kind}};
        my $url = 'http://127.0.0.1:' . $t->port(8080) . '/paid/data.json';
        my ($rc, $out, $err) = $t->run_argv($PY, $t->path('ahead.py'), "$kind-at-once", $url,
            "$kind-at-once", 12, '{}');
        is($out, "200\n" x 12, "$kind: 12 requests at once all end 200") or diag($err);
        my @seen = seen("$kind-at-once");
        cmp_ok(count_of('429 challenge', @seen), '<=', 3,
            "$kind: at most 3 of them (the first in flight beside the free one) got a 429");
        is(scalar(@seen), 12 + count_of('429 challenge', @seen),
            "$kind: one round trip per request beyond those; no solution refused")
            or diag(join ', ', @seen);
        }
    }

    # The README's examples, as written (api.example.com: the second server)
    SKIP: {
        skip('requests or httpx not installed', 10) unless $HAS{requests} && $HAS{httpx};
        my $port = $t->port(8081);
        my @expect = (['Paying ahead', 31, 30], ['Pacing', 4, 0]);
        my $before = 0;
        for my $case (@expect) {
            my ($section, $n, $solved) = @$case;
            my ($block) = readme_blocks("$REPO/clients/python/README.md", $section);
            ok($block, "README.md has a python example under \"$section\"") or next;
            my ($text, $line) = @$block;
            $text =~ s{https://api\.example\.com}{http://127.0.0.1:$port}g;
            $t->write_file('readme.py', $text);
            my ($rc, $out, $err) = $t->run_argv($PY, $t->path('readme.py'));
            is($rc, 0, "README.md:$line ($section): the example runs") or diag($err);
            # this example's entries: those after the last one's
            my @seen = map { /^- (\S+ \S+)$/ ? $1 : () } split /\n/, $t->read_file('readme.log');
            @seen = @seen[$before .. $#seen];
            $before += @seen;
            is(scalar(@seen), $n, "README.md:$line ($section): $n requests, $n entries in the log")
                or diag(join ', ', @seen);
            is(count_of('429 challenge', @seen), 0, "README.md:$line ($section): none is a 429");
            is(count_of('200 solved', @seen), $solved, "README.md:$line ($section): $solved solved");
        }
    }
});

###############################################################################

Test::PowShield::Modes->done_testing;
