'use strict';
// Paying ahead and pacing (docs/protocol.md §6) against a scripted server:
// the next challenge of an answer is solved and sent with the next request
// to that origin, once; without one (or refused) the 429 path is unchanged;
// with `pace` a request after Remaining 0 waits for the reset instead.
const test = require('node:test');
const assert = require('node:assert');

const ps = require('..');
const { FakeServer, paid, paidAhead, unpaid } = require('./fakeserver');

async function withServer(script, fn) {
  const server = await new FakeServer().start();
  server.script = script(server);
  try {
    return await fn(server);
  } finally {
    await server.close();
  }
}

test('1 + 30 requests paid ahead are 31 round trips, each after the first sending the last answer\'s next challenge', () =>
  withServer((s) => Array.from({ length: 31 }, () => s.ahead({ bits: 10 })), async (s) => {
    const f = ps.withPowShield(fetch);
    for (let i = 0; i < 31; i++) {
      const r = await f(s.url);
      assert.strictEqual(r.status, 200);
      await r.text();
    }
    assert.strictEqual(s.requests.length, 31);
    assert.ok(unpaid(s, 0));
    for (let i = 1; i <= 30; i++) assert.ok(paidAhead(s, i, i - 1), `request ${i}`);
  }));

test('powFetch pays ahead too, its calls sharing the solutions', () =>
  withServer((s) => [s.ahead(), s.ahead(), s.ahead({ next: false })], async (s) => {
    for (let i = 0; i < 3; i++) await (await ps.powFetch(s.url)).text();
    assert.strictEqual(s.requests.length, 3);
    assert.ok(paidAhead(s, 1, 0));
    assert.ok(paidAhead(s, 2, 1));
  }));

test('a solution is sent once: after an answer without a next challenge the request goes unpaid', () =>
  withServer((s) => [s.ahead(), s.ahead({ next: false, remaining: 3 }), s.ok()], async (s) => {
    const f = ps.withPowShield(fetch);
    for (let i = 0; i < 3; i++) await (await f(s.url)).text();
    assert.ok(paidAhead(s, 1, 0));
    assert.ok(unpaid(s, 2));
  }));

test('payAhead: false sends no solution ahead; the 429 path pays', () =>
  withServer((s) => [s.ahead(), s.challenge(), s.ok()], async (s) => {
    const f = ps.withPowShield(fetch, { payAhead: false });
    await (await f(s.url)).text();
    assert.strictEqual((await f(s.url)).status, 200);
    assert.ok(unpaid(s, 1));
    assert.ok(paid(s, 2, 8, 0));
  }));

test('a next challenge past its exp is dropped unsent', () =>
  withServer((s) => [s.ahead({ exp: Date.now() + 200 }), s.ok()], async (s) => {
    const f = ps.withPowShield(fetch);
    await (await f(s.url)).text();
    await (await f(s.url)).text();
    assert.ok(unpaid(s, 1));
  }));

test('a solution refused with 403 or 400 is dropped and the request sent again without it', () =>
  withServer((s) => [
    s.ahead(), s.status(403, { 'Content-Type': 'application/json' }, '{"error":"Invalid challenge signature"}'), s.ok('a'),
    s.ahead(), s.status(400, { 'Content-Type': 'application/json' }, '{"error":"Malformed challenge token"}'), s.ok('b'),
  ], async (s) => {
    const f = ps.withPowShield(fetch);
    await (await f(s.url)).text();
    assert.strictEqual(await (await f(s.url)).text(), 'a');
    assert.ok(paidAhead(s, 1, 0));
    assert.ok(unpaid(s, 2));
    await (await f(s.url)).text();
    assert.strictEqual(await (await f(s.url)).text(), 'b');
    assert.ok(paidAhead(s, 4, 1));
    assert.ok(unpaid(s, 5));
    assert.strictEqual(s.requests.length, 6);
  }));

test('a next challenge is judged by its life from arrival (exp - ts), not by this machine\'s clock', () =>
  withServer((s) => [s.ahead({ ts: Date.now() - 120_000 }), s.ok()], async (s) => {
    const f = ps.withPowShield(fetch);
    await (await f(s.url)).text();
    await (await f(s.url)).text();
    assert.ok(paidAhead(s, 1, 0), 'the server\'s clock is behind: its token is still good for a minute');
  }));

test('a next challenge with less than 2 s to live is dropped unsent', () =>
  withServer((s) => [s.ahead({ exp: Date.now() + 1_500 }), s.ok()], async (s) => {
    const f = ps.withPowShield(fetch);
    await (await f(s.url)).text();
    await (await f(s.url)).text();
    assert.ok(unpaid(s, 1));
  }));

test('the application\'s own 400 or 403 to a paid request is the answer, never sent again', () =>
  withServer((s) => [
    s.ahead(), s.status(400, { 'Content-Type': 'application/json' }, '{"error":"name is required"}'),
    s.ahead(), s.status(403, { 'Content-Type': 'text/plain' }, 'not yours'),
    s.ok('never'),
  ], async (s) => {
    const f = ps.withPowShield(fetch, { method: 'POST' });
    await (await f(s.url)).text();
    const invalid = await f(s.url, { method: 'POST', body: 'x' });
    assert.strictEqual(invalid.status, 400);
    assert.strictEqual(await invalid.text(), '{"error":"name is required"}');
    await (await f(s.url)).text();
    const forbidden = await f(s.url, { method: 'POST', body: 'x' });
    assert.strictEqual(forbidden.status, 403);
    assert.strictEqual(await forbidden.text(), 'not yours');
    assert.strictEqual(s.requests.length, 4);
    assert.ok(paidAhead(s, 1, 0));
    assert.ok(paidAhead(s, 3, 1));
  }));

test('a solution refused with 409 is paid through the fresh challenge it carries', () =>
  withServer((s) => [s.ahead(), s.challenge({ status: 409 }), s.ok()], async (s) => {
    const f = ps.withPowShield(fetch);
    await (await f(s.url)).text();
    assert.strictEqual((await f(s.url)).status, 200);
    assert.ok(paidAhead(s, 1, 0));
    assert.ok(paid(s, 2, 8, 0));
  }));

test('requests in flight each take their own solution, one per next challenge received', () =>
  withServer((s) => Array.from({ length: 6 }, () => s.ahead()), async (s) => {
    const f = ps.withPowShield(fetch);
    const three = () => Promise.all([0, 1, 2].map(async () => (await f(s.url)).text()));
    await three();
    await three();
    assert.strictEqual(s.requests.length, 6);
    const sent = s.requests.slice(3).map((r) => r.headers['x-pow-challenge']);
    assert.deepStrictEqual([...sent].sort(), s.nexts.slice(0, 3).map((n) => n.token).sort());
    for (const i of [3, 4, 5]) {
      const j = s.nexts.findIndex((n) => n.token === s.requests[i].headers['x-pow-challenge']);
      assert.ok(paidAhead(s, i, j), `request ${i}`);
    }
  }));

test('a next challenge above maxDifficulty is not solved ahead', () =>
  withServer((s) => [s.ahead({ difficulty: 5 }), s.ok()], async (s) => {
    const f = ps.withPowShield(fetch, { maxDifficulty: 4 });
    await (await f(s.url)).text();
    await (await f(s.url)).text();
    assert.ok(unpaid(s, 1));
  }));

test('with pace, the request after Remaining 0 waits for the reset (t=) and pays nothing', () =>
  withServer((s) => [s.ahead({ resetIn: 1 }), s.ahead({ next: false, remaining: 1 })], async (s) => {
    const f = ps.withPowShield(fetch, { pace: true });
    await (await f(s.url)).text();
    const answered = s.requests[0].at;
    await (await f(s.url)).text();
    assert.strictEqual(s.requests.length, 2);
    assert.ok(unpaid(s, 1));
    assert.ok(s.requests[1].at >= answered + 1000, 'sent after the reset');
  }));

test('with pace, X-RateLimit-Reset (epoch seconds) is followed without RateLimit', () =>
  withServer((s) => [s.ahead({ resetIn: 1, headers: { RateLimit: '' } }), s.ok()], async (s) => {
    const f = ps.withPowShield(fetch, { pace: true });
    await (await f(s.url)).text();
    await (await f(s.url)).text();
    assert.ok(unpaid(s, 1));
    assert.ok(s.requests[1].at >= 1000 * s.resets[0], 'sent after the reset');
  }));

test('with pace, a reset further away than maxWaitMs is paid ahead, not waited for', () =>
  withServer((s) => [s.ahead({ resetIn: 3600 }), s.ok()], async (s) => {
    const f = ps.withPowShield(fetch, { pace: true, maxWaitMs: 5000 });
    await (await f(s.url)).text();
    await (await f(s.url)).text();
    assert.ok(paidAhead(s, 1, 0));
  }));

test('with pace, requests under the limit are not held', () =>
  withServer((s) => [s.ahead({ next: false, remaining: 5 }), s.ok(), s.ok(), s.ok()], async (s) => {
    const f = ps.withPowShield(fetch, { pace: true });
    await (await f(s.url)).text();
    await Promise.all([0, 1, 2].map(async () => (await f(s.url)).text()));
    assert.strictEqual(s.requests.length, 4);
    s.requests.forEach((_, i) => assert.ok(unpaid(s, i), `request ${i}`));
  }));

test('a solution is sent only to its path directory with the same credentials', () =>
  withServer((s) => [s.ahead(), s.ok(), s.ok(), s.ok()], async (s) => {
    const f = ps.withPowShield(fetch);
    const other = new URL('/other/x', s.url).href;
    await (await f(s.url, { headers: { Authorization: 'Bearer a' } })).text();
    await (await f(other, { headers: { Authorization: 'Bearer a' } })).text();
    await (await f(s.url, { headers: { Authorization: 'Bearer b' } })).text();
    await (await f(s.url, { headers: { Authorization: 'Bearer a' } })).text();
    assert.ok(unpaid(s, 1), 'another directory');
    assert.ok(unpaid(s, 2), 'another credential');
    assert.ok(paidAhead(s, 3, 0), 'the same directory and credential');
  }));
