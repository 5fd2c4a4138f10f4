"""``pow_shield.scrapy.PowShieldMiddleware``: each crawl runs in a process
of its own (a Twisted reactor starts once per process) against
``fakeserver``, and prints its stats."""

import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))

from fakeserver import FakeServer, Shield  # noqa: E402

try:
    import scrapy
    from scrapy.http import Request

    from pow_shield import scrapy as pow_scrapy
except ImportError:  # pragma: no cover - optional dependency
    scrapy = None

SPIDER = r'''
import json, sys
import scrapy
from scrapy.crawler import CrawlerProcess

url, pages, settings = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
settings = {"LOG_LEVEL": "ERROR", "TELNETCONSOLE_ENABLED": False,
            "DOWNLOADER_MIDDLEWARES": {"pow_shield.scrapy.PowShieldMiddleware": 560}, **settings}

marks = []

class Pages(scrapy.Spider):
    name = "pages"

    async def start(self):
        for page in range(pages):
            yield scrapy.Request(f"{url}?page={page}", dont_filter=True)

    def parse(self, response):
        marks.extend(k for k in response.meta if "pow_shield" in k)
        yield {"status": response.status}

process = CrawlerProcess(settings)
crawler = process.create_crawler(Pages)
process.crawl(crawler)
process.start()
stats = crawler.stats.get_stats()
stats["marks_seen"] = marks
print(json.dumps(stats, default=str))
'''


@unittest.skipIf(scrapy is None, "Scrapy not installed")
class ScrapyCrawlTest(unittest.TestCase):
    def setUp(self):
        self.server = FakeServer().__enter__()
        self.addCleanup(self.server.__exit__)

    def crawl(self, pages, **settings):
        """Crawls ``pages`` pages of the fake server: (stats, stderr)."""
        with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
            f.write(SPIDER)
        self.addCleanup(os.unlink, f.name)
        env = dict(os.environ, PYTHONPATH=os.path.join(HERE, ".."))
        done = subprocess.run(
            [sys.executable, f.name, self.server.url(), str(pages), json.dumps(settings)],
            capture_output=True, text=True, env=env, timeout=120,
        )
        self.assertEqual(done.returncode, 0, done.stderr)
        return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr

    def test_a_crawl_over_the_limit_pays_each_page_in_one_round_trip(self):
        shield = Shield(limit=5, difficulty=1)
        self.server.responder = shield
        stats, _ = self.crawl(30, CONCURRENT_REQUESTS=8)
        self.assertEqual(stats.get("item_scraped_count"), 30)
        self.assertEqual(shield.results.count("challenge"), 0)
        self.assertEqual((len(shield.results), shield.results.count("solved")), (30, 25))
        self.assertEqual((stats.get("pow_shield/paid"), stats.get("pow_shield/paid_ahead")), (25, 25))

    def test_without_pay_ahead_a_429_is_paid_and_not_retried_by_scrapy(self):
        shield = Shield(limit=1, difficulty=1, pay_ahead=False)
        self.server.responder = shield
        stats, _ = self.crawl(3, POW_SHIELD_PAY_AHEAD=False, CONCURRENT_REQUESTS=1)
        self.assertEqual(stats.get("item_scraped_count"), 3)
        self.assertEqual(shield.results, ["pass", "challenge", "solved", "challenge", "solved"])
        self.assertEqual(stats.get("pow_shield/paid_after_challenge"), 2)
        self.assertNotIn("retry/count", stats)
        self.assertEqual(stats["marks_seen"], [], "the spider sees its own request, not the resend")

    def test_a_block_is_an_error_closes_the_spider_and_is_never_retried(self):
        self.server.responder = lambda request: FakeServer.blocked(status=429)
        stats, err = self.crawl(10)
        self.assertEqual(stats.get("finish_reason"), "pow_shield_blocked")
        self.assertIn("ERROR: pow-shield:", err)
        self.assertLessEqual(len(self.server.requests), 4, "no more than were in flight")
        self.assertNotIn("retry/count", stats, "a block with status 429 is not retried either")
        self.assertEqual(stats.get("item_scraped_count", 0), 0)


@unittest.skipIf(scrapy is None, "Scrapy not installed")
class ScrapyPartsTest(unittest.TestCase):
    def test_pow_shield_wait_is_a_bool_or_seconds(self):
        read = pow_scrapy._wait_setting
        self.assertEqual([read(v) for v in (True, False, None, "true", "off", "", 10, "10", "0")],
                         [True, False, False, True, False, False, 10.0, 10.0, False])

    def test_scrapy_headers_read_as_one_text_per_name(self):
        request = Request("http://h/", headers={"RateLimit": ['"a";r=1', '"b";r=0'], "X-One": "1"})
        self.assertEqual(pow_scrapy._plain(request.headers), {"Ratelimit": '"a";r=1, "b";r=0', "X-One": "1"})

    def test_a_copy_of_a_sent_request_drops_the_solution_put_on_it(self):
        sent = Request("http://h/", headers={"X-PoW-Challenge": "t.k", "X-PoW-Nonce": "7"},
                       meta={pow_scrapy._TOKEN: "t.k"})
        copy = sent.replace(url="http://h/next")  # as a redirect or a retry makes it
        pow_scrapy.PowShieldMiddleware()._forget(copy)
        self.assertIsNone(copy.headers.get("X-PoW-Challenge"))
        self.assertIsNone(copy.headers.get("X-PoW-Nonce"))

    def test_a_solution_of_the_spiders_own_is_kept(self):
        own = Request("http://h/", headers={"X-PoW-Challenge": "mine.k", "X-PoW-Nonce": "7"},
                      meta={pow_scrapy._TOKEN: "other.k"})
        pow_scrapy.PowShieldMiddleware()._forget(own)
        self.assertEqual(own.headers.get("X-PoW-Challenge"), b"mine.k")


if __name__ == "__main__":
    unittest.main()
