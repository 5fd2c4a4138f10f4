#!/usr/bin/perl

# Scrapy through the shield (issue 39, point 2): a plain spider crawling 30
# pages over a limit of 5 gets the 5 under the limit and 429s for the rest
# (Scrapy retries them at once, unpaid, and the crawl still ends
# "finished"). With pow_shield.scrapy.PowShieldMiddleware, configured with
# the settings of clients/python/README.md's "Scrapy" section, at
# CONCURRENT_REQUESTS = 8: 30 × 200, no 403 and no 429, one round trip per
# paid page (30 entries in the access log, 25 of them solved ahead), the
# payments counted in the crawl's stats; the same under Twisted's own
# reactor. A crawler already blocked: the block is logged as an ERROR, the
# spider closes "pow_shield_blocked", and no blocked page is retried. A
# price above POW_SHIELD_MAX_BITS is not paid (nor retried); with
# POW_SHIELD_WAIT the crawl waits Retry-After out instead of paying.
# Both modes (Test::PowShield::Modes). The time per paid page is shown
# with diag (never asserted).
#
# Scrapy comes from PyPI (Debian 12's is 2.8): `make deps-python` installs
# it in target/py-venv, which this suite uses when it is there
# (TEST_PYTHON_FRAMEWORKS names another interpreter); without Scrapy it
# skips.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use JSON::PP ();
use Test::More;
use Test::PowShield qw(:pow :util);
use Test::PowShield::Modes;
use Test::PowShield::Examples qw(readme_blocks);

###############################################################################

my $REPO = $Test::PowShield::REPO;
my $PY = $ENV{TEST_PYTHON_FRAMEWORKS}
    || (-x "$REPO/target/py-venv/bin/python" ? "$REPO/target/py-venv/bin/python" : '/usr/bin/python3');
plan(skip_all => "$PY not found (apt-get install python3)") unless -x $PY;
plan(skip_all => "Scrapy not installed for $PY (make deps-python)")
    unless system("'$PY' -c 'import scrapy' 2>/dev/null") == 0;

my $conf = http_conf(<<'EOF');
    %%REDIS%%

    log_format crawl '$http_x_client $status $pow_shield_result';

    server {
        %%TEST_SERVER%%
        access_log %%TESTDIR%%/crawl.log crawl;

        pow_shield_key $http_x_client;

        location /crawl/ {
            pow_shield_limit 5 60s;
            pow_shield_difficulty 12b;
        }

        location /red/ {
            pow_shield_limit 1 1h;
            pow_shield_difficulty 12b;
            pow_shield_strikes 2 60s;
        }

        location /dear/ {
            pow_shield_limit 1 1h;
            pow_shield_difficulty 16b;
        }

        location /wait/ {
            pow_shield_limit 2 2s;
            pow_shield_difficulty 12b;
        }
    }
EOF

my %files = map { ("html/$_/data.json" => qq({"dir":"$_"}\n)) } qw(crawl red dear wait);

my $spider_py = <<'EOF';
# crawl.py URL CLIENT PAGES SETTINGS_JSON [SETTINGS_PY]: one spider crawls
# URL?page=0 .. PAGES-1 (X-Client: CLIENT) with Scrapy's defaults, then
# SETTINGS_PY's upper-case names (a settings.py), then SETTINGS_JSON; prints
# what the crawl's stats say, as JSON.
import json, sys, time
import scrapy
from scrapy.crawler import CrawlerProcess

url, client, pages, overrides = sys.argv[1], sys.argv[2], int(sys.argv[3]), json.loads(sys.argv[4])
settings = {"LOG_LEVEL": "INFO", "TELNETCONSOLE_ENABLED": False, "ROBOTSTXT_OBEY": False,
            "DEFAULT_REQUEST_HEADERS": {"X-Client": client}}
if len(sys.argv) > 5:
    names = {}
    exec(open(sys.argv[5]).read(), {}, names)
    settings.update({k: v for k, v in names.items() if k.isupper()})
settings.update(overrides)
parsed = []

class Pages(scrapy.Spider):
    name = "pages"

    async def start(self):
        for page in range(pages):
            yield scrapy.Request(f"{url}?page={page}", dont_filter=True)

    def parse(self, response):
        parsed.append(time.monotonic())
        yield {"page": response.url}

process = CrawlerProcess(settings)
crawler = process.create_crawler(Pages)
began = time.monotonic()
process.crawl(crawler)
process.start()
stats = crawler.stats.get_stats()
from scrapy.utils.reactor import is_asyncio_reactor_installed
print(json.dumps({
    "items": stats.get("item_scraped_count", 0),
    "finish_reason": stats.get("finish_reason"),
    "errors": stats.get("log_count/ERROR", 0),
    "retries": stats.get("retry/count", 0),
    "pow": {k.split("/", 1)[1]: v for k, v in stats.items() if k.startswith("pow_shield/")},
    "reactor": "asyncio" if is_asyncio_reactor_installed() else "twisted",
    "parsed_ms": [round((t - began) * 1000, 1) for t in sorted(parsed)],
}))
EOF

###############################################################################

my $t;

# What the server logged for one client: "status result" per request.
sub seen {
    my ($client) = @_;
    return map { /^\Q$client\E (\S+ \S+)$/ ? $1 : () } split /\n/, $t->read_file('crawl.log');
}

sub count_of { my ($what, @seen) = @_; scalar grep { $_ eq $what } @seen }

# crawl($uri, $client, $pages, \%settings, $settings_py) -> what it printed (decoded)
sub crawl {
    my ($uri, $client, $pages, $settings, $settings_py) = @_;
    my $url = 'http://127.0.0.1:' . $t->port(8080) . $uri;
    my ($rc, $out, $err) = $t->run_argv($PY, $t->path('crawl.py'), $url, $client, $pages,
        JSON::PP->new->canonical->encode($settings || {}), defined $settings_py ? ($settings_py) : ());
    my ($json) = $out =~ /^(\{.*\})\s*$/m;
    my $got = eval { JSON::PP::decode_json($json // '') };
    diag("$client: exit $rc, printed '$out'; $err") if $rc != 0 || !$got;
    $t->write_file("$client.err", $err);
    return $got || {};
}

# Milliseconds per paid page: the pages over the limit go one at a time,
# so the time from the last free page parsed to the last page, per page.
sub ms_per_paid {
    my ($got, $free) = @_;
    my @ms = @{ $got->{parsed_ms} || [] };
    return 'n/a' if @ms <= $free;
    return sprintf('%.1f', ($ms[-1] - $ms[$free - 1]) / (@ms - $free));
}

local $ENV{PYTHONPATH} = "$REPO/clients/python";

my $MW = { 'pow_shield.scrapy.PowShieldMiddleware' => 560 };

my ($readme) = readme_blocks("$REPO/clients/python/README.md", 'Scrapy');

Test::PowShield::Modes->each_mode($conf, redis => 'timeout=3s', files => \%files, sub {
    my ($m) = @_;
    $t = $m->node(1);
    $t->write_file('crawl.py', $spider_py);

    # a plain spider: the pages under the limit, then 429s
    my $got = crawl('/crawl/data.json', 'plain', 30, { CONCURRENT_REQUESTS => 8 });
    my @seen = seen('plain');
    is($got->{items}, 5, 'without the middleware: 5 of 30 pages (those under the limit)');
    cmp_ok(count_of('429 challenge', @seen), '>', 0, 'without the middleware: the others get 429s')
        or diag(join ', ', @seen);
    is($got->{finish_reason}, 'finished', 'without the middleware: and the crawl says "finished"');

    # the README's settings: 30 × 200, one round trip per paid page
    ok($readme, 'clients/python/README.md has a settings block under "Scrapy"') or return;
    $t->write_file('readme_settings.py', $readme->[0]);
    like($readme->[0], qr/^DOWNLOADER_MIDDLEWARES = \{"pow_shield\.scrapy\.PowShieldMiddleware": 560\}$/m,
        'the README block enables the middleware at 560');
    $got = crawl('/crawl/data.json', 'paid', 30, { CONCURRENT_REQUESTS => 8 }, $t->path('readme_settings.py'));
    @seen = seen('paid');
    is($got->{items}, 30, 'with the middleware at CONCURRENT_REQUESTS = 8: 30 pages of 30');
    is(scalar(@seen), 30, 'one round trip per page: 30 entries in the access log') or diag(join ', ', @seen);
    is(count_of('200 solved', @seen), 25, '25 of them paid, each in its one round trip');
    is(count_of('429 challenge', @seen), 0, 'no 429');
    is(scalar(grep { /^403 / } @seen), 0, 'no 403');
    is($got->{finish_reason}, 'finished', 'the crawl ends "finished"');
    is_deeply([@{ $got->{pow} }{qw(paid paid_ahead paid_bits/12)}], [25, 25, 25],
        "the stats count 25 paid (ahead), at 12 bits")
        or diag(explain($got->{pow}));
    is($got->{reactor}, 'asyncio', "under Scrapy's default (asyncio) reactor");
    diag("$m: Scrapy, 30 pages over a limit of 5 at CONCURRENT_REQUESTS = 8: " . scalar(@seen)
        . ' round trips, ' . ms_per_paid($got, 5) . ' ms per paid page');

    # Twisted's own reactor
    $got = crawl('/crawl/data.json', 'twisted', 30, { DOWNLOADER_MIDDLEWARES => $MW, CONCURRENT_REQUESTS => 8,
        TWISTED_REACTOR => undef });
    @seen = seen('twisted');
    is($got->{reactor}, 'twisted', "TWISTED_REACTOR = None: Twisted's own reactor");
    is($got->{items}, 30, 'under it: 30 pages of 30');
    is(join(' ', scalar(@seen), count_of('200 solved', @seen), count_of('429 challenge', @seen)), '30 25 0',
        'under it too: 30 round trips, 25 paid, no 429') or diag(join ', ', @seen);

    # a crawler already blocked: an ERROR, closed, nothing retried
    $t->http_get('/red/data.json', 'X-Client' => 'red') for 1 .. 4;
    is($t->http_get('/red/data.json', 'X-Client' => 'red')->header('X-PoW-Shield'), 'blocked',
        'the "red" client is blocked before it crawls');
    my $before = () = seen('red');
    $got = crawl('/red/data.json', 'red', 10, { DOWNLOADER_MIDDLEWARES => $MW, CONCURRENT_REQUESTS => 8 });
    @seen = seen('red');
    @seen = @seen[$before .. $#seen];
    is($got->{finish_reason}, 'pow_shield_blocked', 'blocked: the spider closes "pow_shield_blocked"');
    cmp_ok($got->{errors}, '>=', 1, 'blocked: logged as an ERROR');
    like($t->read_file('red.err'), qr/ERROR: pow-shield: \S+ blocked this crawler \(HTTP 403\)/,
        'blocked: the ERROR says who blocked it');
    is($got->{items}, 0, 'blocked: no page');
    is($got->{retries}, 0, 'blocked: Scrapy retried nothing');
    cmp_ok(scalar(@seen), '<=', 4, 'blocked: no more requests than were in flight (4)')
        or diag(join ', ', @seen);

    # a price above POW_SHIELD_MAX_BITS: not paid, not retried
    $got = crawl('/dear/data.json', 'dear', 3, { DOWNLOADER_MIDDLEWARES => $MW, POW_SHIELD_MAX_BITS => 12,
        POW_SHIELD_MAX_WAIT => 0 });
    @seen = seen('dear');
    is(join(', ', sort @seen), '200 pass, 429 challenge, 429 challenge',
        'POW_SHIELD_MAX_BITS 12 against 16 bits: nothing paid, each page sent once');
    is($got->{items}, 1, 'POW_SHIELD_MAX_BITS: only the free page is parsed');
    is($got->{pow}{'gave_up/TooDifficult'}, 2, 'POW_SHIELD_MAX_BITS: the stats count the 2 given up');

    # POW_SHIELD_WAIT: Retry-After waited out instead of paying
    $got = crawl('/wait/data.json', 'wait', 5, { DOWNLOADER_MIDDLEWARES => $MW, POW_SHIELD_WAIT => JSON::PP::true });
    @seen = seen('wait');
    is($got->{items}, 5, 'POW_SHIELD_WAIT: 5 pages of 5');
    is(count_of('200 solved', @seen), 0, 'POW_SHIELD_WAIT: none paid') or diag(join ', ', @seen);
    cmp_ok($got->{pow}{waited} // 0, '>=', 1, 'POW_SHIELD_WAIT: the stats count the waits');
    is(scalar(@seen), 5 + count_of('429 challenge', @seen), 'POW_SHIELD_WAIT: each 429 waited out, then one request');
});

###############################################################################

Test::PowShield::Modes->done_testing;
