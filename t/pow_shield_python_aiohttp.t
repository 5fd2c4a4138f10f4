#!/usr/bin/perl

# aiohttp through the shield (issue 39, point 3): one
# pow_shield.aiohttp.PowShieldMiddleware in ClientSession(middlewares=...)
# makes 35 requests over a limit of 5, one by one and as an asyncio.gather
# of 35: all 200, 35 entries in the access log, 30 of them solved ahead and
# none a 429: one round trip per paid request. The README's "aiohttp"
# example runs as written (api.example.com: a second server). pace=True
# waits for the reset instead of paying; a client already blocked raises
# Blocked. Both modes (Test::PowShield::Modes). The time per paid request
# is shown with diag (never asserted).
#
# aiohttp comes from PyPI (client middlewares need 3.12; Debian 12 has
# 3.8): `make deps-python` installs it in target/py-venv, which this suite
# uses when it is there (TEST_PYTHON_FRAMEWORKS names another
# interpreter); without aiohttp 3.12 it skips.

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
my $PY = $ENV{TEST_PYTHON_FRAMEWORKS}
    || (-x "$REPO/target/py-venv/bin/python" ? "$REPO/target/py-venv/bin/python" : '/usr/bin/python3');
plan(skip_all => "$PY not found (apt-get install python3)") unless -x $PY;
plan(skip_all => "aiohttp 3.12 or later not installed for $PY (make deps-python)")
    unless system("'$PY' -c 'import aiohttp.client_middlewares' 2>/dev/null") == 0;

my $conf = http_conf(<<'EOF');
    %%REDIS%%

    log_format aio '$http_x_client $status $pow_shield_result';

    server {
        %%TEST_SERVER%%
        access_log %%TESTDIR%%/aio.log aio;

        pow_shield_key $http_x_client;

        location /items/ {
            pow_shield_limit 5 60s;
            pow_shield_difficulty 12b;
        }

        location /paced/ {
            pow_shield_limit 2 2s;
            pow_shield_difficulty 12b;
        }

        location /red/ {
            pow_shield_limit 1 1h;
            pow_shield_difficulty 12b;
            pow_shield_strikes 2 60s;
        }
    }

    # the README's example: api.example.com, keyed by address
    server {
        listen 127.0.0.1:%%PORT_8081%%;
        root %%TESTDIR%%/html;
        access_log %%TESTDIR%%/readme.log aio;

        location /items {
            pow_shield_limit 5 60s;
            pow_shield_difficulty 12b;
            try_files /items/data.json =404;
        }
    }
EOF

my %files = map { ("html/$_/data.json" => qq({"dir":"$_"}\n)) } qw(items paced red);

my $client_py = <<'EOF';
# aio.py HOW URL CLIENT COUNT OPTIONS_JSON: COUNT GETs through one
# PowShieldMiddleware, one by one (HOW = seq) or gathered (HOW = gather);
# prints each one's status (or "raised <error> <status>") in the order
# sent, then "ms <per paid request>": from the last free answer to the
# last answer, per request after it.
import asyncio, json, sys, time
import aiohttp
import pow_shield, pow_shield.aiohttp

how, url, client, count, options = sys.argv[1:6]
count, options, free = int(count), json.loads(options), 5

async def main():
    mw = pow_shield.aiohttp.PowShieldMiddleware(**options)
    done = []
    async with aiohttp.ClientSession(middlewares=(mw,), headers={"X-Client": client}) as session:
        async def get():
            try:
                async with session.get(url) as r:
                    await r.read()
                    return r.status
            except pow_shield.PowShieldError as e:
                return f"raised {type(e).__name__} {getattr(e.response, 'status', '-')}"
            finally:
                done.append(time.monotonic())
        if how == "gather":
            statuses = await asyncio.gather(*(get() for _ in range(count)))
        else:
            statuses = [await get() for _ in range(count)]
    for status in statuses:
        print(status)
    done.sort()
    if len(done) > free:
        print("ms %.1f" % ((done[-1] - done[free - 1]) * 1000 / (len(done) - free)))

asyncio.run(main())
EOF

###############################################################################

my $t;

sub seen {
    my ($client, $log) = @_;
    return map { /^\Q$client\E (\S+ \S+)$/ ? $1 : () } split /\n/, $t->read_file($log // 'aio.log');
}

sub count_of { my ($what, @seen) = @_; scalar grep { $_ eq $what } @seen }

# python($how, $uri, $client, $count, \%options) -> (statuses, ms per paid request)
sub python {
    my ($how, $uri, $client, $count, $options) = @_;
    my $url = 'http://127.0.0.1:' . $t->port(8080) . $uri;
    my ($rc, $out, $err) = $t->run_argv($PY, $t->path('aio.py'), $how, $url, $client, $count,
        json_encode($options || {}));
    diag("$client: exit $rc: $err") if $rc != 0;
    my ($ms) = $out =~ /^ms (\S+)$/m;
    return ([grep { !/^ms / } split /\n/, $out], $ms // 'n/a');
}

local $ENV{PYTHONPATH} = "$REPO/clients/python";

Test::PowShield::Modes->each_mode($conf, redis => 'timeout=3s', files => \%files, sub {
    my ($m) = @_;
    $t = $m->node(1);
    $t->write_file('aio.py', $client_py);

    for my $how (qw(seq gather)) {
        my $name = $how eq 'seq' ? 'one by one' : 'gathered';
        my ($got, $ms) = python($how, '/items/data.json', "aio-$how", 35);
        is(join(' ', @$got), join(' ', (200) x 35), "$name: 35 requests over a limit of 5 all end 200");
        my @seen = seen("aio-$how");
        is(scalar(@seen), 35, "$name: one round trip each: 35 entries in the access log")
            or diag(join ', ', @seen);
        is(count_of('200 solved', @seen), 30, "$name: 30 of them paid ahead");
        is(count_of('429 challenge', @seen), 0, "$name: none a 429");
        diag("$m: aiohttp $name, 35 requests over a limit of 5: " . scalar(@seen)
            . " round trips, $ms ms per paid request");
    }

    # pace: 2 per 2 s, 4 requests; the 2 beyond the limit wait for the reset
    my ($got) = python('seq', '/paced/data.json', 'aio-pace', 4, { pace => \1 });
    is(join(' ', @$got), '200 200 200 200', 'pace: 4 requests all end 200');
    is(join(', ', seen('aio-pace')), join(', ', ('200 pass') x 4),
        'pace: 4 entries, none 429 or solved: it waited for the reset');

    # blocked already: Blocked, and no retry
    $t->http_get('/red/data.json', 'X-Client' => 'aio-red') for 1 .. 4;
    my $before = () = seen('aio-red');
    ($got) = python('seq', '/red/data.json', 'aio-red', 1);
    is("@$got", 'raised Blocked 403', 'a blocked client: the request raises Blocked');
    is(scalar(seen('aio-red')) - $before, 1, 'a blocked client: sent once, not retried');

    # the README's example, as written
    my ($block) = readme_blocks("$REPO/clients/python/README.md", 'aiohttp');
    ok($block, 'clients/python/README.md has a python example under "aiohttp"') or return;
    my ($text, $line) = @$block;
    my $port = $t->port(8081);
    $text =~ s{https://api\.example\.com}{http://127.0.0.1:$port}g;
    $t->write_file('readme.py', $text);
    my ($rc, $out, $err) = $t->run_argv($PY, $t->path('readme.py'));
    is($rc, 0, "README.md:$line (aiohttp): the example runs") or diag($err);
    my @seen = map { /^- (\S+ \S+)$/ ? $1 : () } split /\n/, $t->read_file('readme.log');
    is(scalar(@seen), 35, "README.md:$line (aiohttp): 35 requests, 35 entries in the log")
        or diag(join ', ', @seen);
    is(count_of('429 challenge', @seen), 0, "README.md:$line (aiohttp): none is a 429");
    is(count_of('200 solved', @seen), 30, "README.md:$line (aiohttp): 30 solved");
});

###############################################################################

Test::PowShield::Modes->done_testing;
