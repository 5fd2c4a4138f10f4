#!/usr/bin/perl

# The Python client (clients/python, issue 9): installed with pip, its
# requests Session, requests auth= object (requests.get(url,
# auth=RequestsAuth())), mountable HTTPAdapter and httpx auth flow (sync
# and async) pay their way through
# a 429, solve the fresh challenge of a 409 and a 410, stop with Blocked when
# the circuit breaker is open, and honour max_difficulty and prefer_wait.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Test::PowShield qw(:pow :util);

###############################################################################

my $PY = $ENV{TEST_PYTHON} || '/usr/bin/python3';
plan(skip_all => "$PY not found (apt-get install python3)") unless -x $PY;

my $SECRET = 'python-suite-secret-0123456789abcdef';

my $t = Test::PowShield->new;

$t->write_file_expand('nginx.conf', http_conf(<<"EOF"));
    pow_shield_secret "$SECRET";

    server {
        %%TEST_SERVER%%

        add_header X-Result \$pow_shield_result always;

        pow_shield_key \$http_x_client;
        pow_shield_challenge_ttl 30s;

        location /api/ {
            pow_shield_limit 1 1h;
            pow_shield_difficulty 2;
        }

        location /hard/ {
            pow_shield_limit 1 1h;
            pow_shield_difficulty 3;
        }

        location /red/ {
            pow_shield_limit 1 1h;
            pow_shield_difficulty 1;
            pow_shield_strikes 2 60s;
        }

        location /fast/ {
            pow_shield_limit 1 2s;
            pow_shield_difficulty 1;
        }

        # a Retry-After far beyond max_wait, however slow the client starts
        location /slow/ {
            pow_shield_limit 1 1m;
            pow_shield_difficulty 1;
        }
    }
EOF

for my $dir (qw(api hard red fast slow)) {
    $t->write_file("html/$dir/data.json", qq({"dir":"$dir"}\n));
}

$t->run;

###############################################################################
# pip install ./clients/python (a copy: setuptools builds in the source tree)

my $dir = $t->testdir;
my $src = "$dir/pkg";
my $site = "$dir/site";
system('cp', '-r', "$Test::PowShield::REPO/clients/python", $src) == 0
    or BAIL_OUT("cannot copy clients/python");
my $pip = qx{'$PY' -m pip install --quiet --no-build-isolation --no-deps --no-index --target '$site' '$src' 2>&1};
is($?, 0, 'pip install ./clients/python succeeds') or diag($pip);

$ENV{PYTHONPATH} = $site;
like(scalar qx{'$PY' -c 'import pow_shield; print(pow_shield.__version__, pow_shield.__file__)'},
    qr{^0\.1\.0 \Q$site\E/pow_shield/__init__\.py$}, 'the installed package imports');

$t->write_file('client.py', <<'EOF');
# client.py KIND URL CLIENT OPTIONS_JSON HEADERS_JSON: one GET through
# pow_shield; prints "<status> <X-Result> <history statuses or ->" or
# "raised <error> <status>".
import asyncio, json, sys
import pow_shield

kind, url, client, options, extra = sys.argv[1:6]
options, headers = json.loads(options), {"X-Client": client, **json.loads(extra)}

# "_prime": one plain GET first, from here, so that the client's own
# request follows it at once however slowly Python started
if options.pop("_prime", False):
    import urllib.error, urllib.request
    if kind in ("requests-auth", "adapter", "session"):
        import requests
    else:
        import httpx
    try:
        urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=10)
    except urllib.error.HTTPError:
        pass

def show(r):
    history = " ".join(str(h.status_code) for h in r.history) or "-"
    print(r.status_code, r.headers.get("X-Result", "-"), history)

try:
    if kind == "session":
        with pow_shield.Session(**options) as s:
            show(s.get(url, headers=headers, timeout=10))
    elif kind == "requests-auth":
        import requests
        show(requests.get(url, headers=headers, timeout=10, auth=pow_shield.RequestsAuth(**options)))
    elif kind == "adapter":
        import requests
        with requests.Session() as s:
            s.mount("http://", pow_shield.HTTPAdapter(**options))
            show(s.get(url, headers=headers, timeout=10))
    elif kind == "httpx":
        import httpx
        with httpx.Client(auth=pow_shield.HttpxAuth(**options), timeout=10) as c:
            show(c.get(url, headers=headers))
    elif kind == "httpx-async":
        import httpx
        async def main():
            async with httpx.AsyncClient(auth=pow_shield.HttpxAuth(**options), timeout=10) as c:
                show(await c.get(url, headers=headers))
        asyncio.run(main())
except pow_shield.PowShieldError as e:
    print("raised", type(e).__name__, getattr(e.response, "status_code", "-"))
EOF

my %HAS;
for my $lib (qw(requests httpx)) {
    $HAS{$lib} = system($PY, '-c', "import $lib") == 0;
}
my %NEEDS = (session => 'requests', 'requests-auth' => 'requests', adapter => 'requests',
    httpx => 'httpx', 'httpx-async' => 'httpx');

# python($kind, $uri, $client, \%options, \%headers) -> the line it printed
sub python {
    my ($kind, $uri, $client, $options, $headers) = @_;
    my $url = 'http://127.0.0.1:' . $t->port(8080) . $uri;
    open(my $fh, '-|', $PY, "$dir/client.py", $kind, $url, $client,
        json_encode($options || {}), json_encode($headers || {}))
        or die "cannot run $PY: $!";
    my $out = do { local $/; <$fh> } // '';
    close $fh;
    chomp $out;
    return $out;
}

sub get {
    my ($client, $uri, %h) = @_;
    return $t->http_get($uri, 'X-Client' => $client, %h);
}

###############################################################################

for my $kind (qw(session requests-auth adapter httpx httpx-async)) {
    SKIP: {
    skip("$NEEDS{$kind} not installed", 12) unless $HAS{$NEEDS{$kind}};

    # over the limit: the 429 is paid, the request goes through
    is(get("$kind-pay", '/api/data.json')->status, 200, "$kind: the free request");
    is(python($kind, '/api/data.json', "$kind-pay"), '200 solved 429',
        "$kind: a 429 is paid and the request passes as solved");

    # a spent solution: 409 with a fresh challenge, solved
    get("$kind-409", '/api/data.json');
    my %paid = solution(get("$kind-409", '/api/data.json'));
    is(get("$kind-409", '/api/data.json', %paid)->status, 200, "$kind: spend a solution");
    is(python($kind, '/api/data.json', "$kind-409", {}, \%paid), '200 solved 409',
        "$kind: a 409 (spent) is answered by solving its fresh challenge");

    # an expired challenge: 410 with a fresh challenge, solved
    get("$kind-410", '/api/data.json');
    my $old = forge_token($SECRET, { ip => '127.0.0.1', ts => now_ms() - 600_000,
        difficulty => 2, salt => '0123456789abcdef0123456789abcdef' });
    my %expired = ('X-PoW-Challenge' => $old,
        'X-PoW-Nonce' => solve('0123456789abcdef0123456789abcdef', 2));
    is(get("$kind-410", '/api/data.json', %expired)->status, 410, "$kind: the forged token is expired");
    is(python($kind, '/api/data.json', "$kind-410", {}, \%expired), '200 solved 410',
        "$kind: a 410 (expired) is answered by solving its fresh challenge");

    # the breaker open: Blocked, nothing paid
    is(statuses(map { get("$kind-red", '/red/data.json') } 1 .. 3), '200 429 429',
        "$kind: two strikes");
    is(python($kind, '/red/data.json', "$kind-red"), 'raised Blocked 403',
        "$kind: the open breaker raises Blocked");

    # max_difficulty: refused above, paid at the limit
    get("$kind-hard", '/hard/data.json');
    is(python($kind, '/hard/data.json', "$kind-hard", { max_difficulty => 2 }),
        'raised TooDifficult 429', "$kind: difficulty 3 over max_difficulty 2 raises TooDifficult");
    is(python($kind, '/hard/data.json', "$kind-hard", { max_difficulty => 3 }),
        '200 solved 429', "$kind: difficulty 3 within max_difficulty 3 is paid");

    # prefer_wait: sleep Retry-After (at most 2 s here), then pass unpaid
    # (the 2 s window is used up by the script itself: a slow start of
    # Python on a busy machine must not outlast it)
    is(python($kind, '/fast/data.json', "$kind-wait", { _prime => \1, prefer_wait => \1 }),
        '200 pass 429', "$kind: prefer_wait waits Retry-After instead of paying");

    # max_wait: a Retry-After beyond it is paid, however willing to wait
    get("$kind-maxwait", '/slow/data.json');
    is(python($kind, '/slow/data.json', "$kind-maxwait", { prefer_wait => \1, max_wait => 0 }),
        '200 solved 429', "$kind: a Retry-After beyond max_wait is paid");
    }
}

$t->done_testing;
