'use strict';
// withPowShield / powFetch against a scripted server: each answer of the
// shield leads to the same move as in the CLI and the Python client
// (docs/protocol.md §7, §8).
const test = require('node:test');
const assert = require('node:assert');

const ps = require('..');
const { FakeServer, makeToken, paid } = require('./fakeserver');

async function withServer(script, fn) {
  const server = await new FakeServer().start();
  server.script = script(server);
  try {
    return await fn(server);
  } finally {
    await server.close();
  }
}

test('a 429 is paid and the request sent again; the answer is handed back', () =>
  withServer((s) => [s.challenge(), s.ok('items')], async (s) => {
    const r = await ps.powFetch(s.url);
    assert.strictEqual(r.status, 200);
    assert.strictEqual(await r.text(), 'items');
    assert.ok(paid(s, 1, 8));
  }));

test('the fresh challenge of a 409, 410 and 422 is solved', () =>
  withServer((s) => [s.challenge({ status: 409 }), s.challenge({ status: 410 }), s.challenge({ status: 422 }), s.ok()], async (s) => {
    assert.strictEqual((await ps.powFetch(s.url)).status, 200);
    for (const i of [1, 2, 3]) assert.ok(paid(s, i, 8), `request ${i}`);
  }));

test('a challenge in a problem+json body alone is paid', () =>
  withServer((s) => [s.challenge({ inBody: true, contentType: 'application/problem+json' }), s.ok()], async (s) => {
    assert.strictEqual((await ps.powFetch(s.url)).status, 200);
    assert.ok(paid(s, 1, 8));
  }));

test('a token with bits is solved for its bits; X-PoW-Bits above it is followed', () =>
  withServer((s) => [s.challenge({ difficulty: 3, bits: 10 }), s.challenge({ difficulty: 3, bits: 9, headers: { 'X-PoW-Bits': '11' } }), s.ok()], async (s) => {
    assert.strictEqual((await ps.powFetch(s.url)).status, 200);
    assert.ok(paid(s, 1, 10));
    assert.ok(paid(s, 2, 11));
  }));

test('X-PoW-Difficulty above the token is followed', () =>
  withServer((s) => [s.challenge({ difficulty: 1, headers: { 'X-PoW-Difficulty': '3' } }), s.ok()], async (s) => {
    assert.strictEqual((await ps.powFetch(s.url)).status, 200);
    assert.ok(paid(s, 1, 12));
  }));

test('blocked and banned throw BlockedError and BannedError, nothing resent', () =>
  withServer((s) => [s.blocked(), s.blocked('banned')], async (s) => {
    await assert.rejects(ps.powFetch(s.url), (e) => e instanceof ps.BlockedError && !(e instanceof ps.BannedError) && e.response.status === 403);
    await assert.rejects(ps.powFetch(s.url), ps.BannedError);
    assert.strictEqual(s.requests.length, 2);
  }));

test('maxDifficulty throws TooDifficultError before any work or resend', () =>
  withServer((s) => [s.challenge({ difficulty: 5 }), s.ok()], async (s) => {
    await assert.rejects(ps.powFetch(s.url, { powShield: { maxDifficulty: 4 } }),
      (e) => e instanceof ps.TooDifficultError && e.difficulty === 5 && e.response.status === 429);
    assert.strictEqual(s.requests.length, 1);
  }));

test('a forged difficulty 12 gives up at maxSolveTimeMs with SolveTimeoutError', () =>
  withServer((s) => [s.challenge({ difficulty: 12 }), s.ok()], async (s) => {
    await assert.rejects(ps.powFetch(s.url, { powShield: { maxSolveTimeMs: 200 } }), ps.SolveTimeoutError);
    assert.strictEqual(s.requests.length, 1);
  }));

test('retries are bounded by maxRetries (5 by default, as every client)', () =>
  withServer((s) => Array.from({ length: 7 }, () => s.challenge({ difficulty: 1 })), async (s) => {
    assert.strictEqual(ps.DEFAULT_MAX_RETRIES, 5);
    await assert.rejects(ps.powFetch(s.url), ps.RetriesExhaustedError);
    assert.strictEqual(s.requests.length, 6);
  }));

test('preferWait sleeps Retry-After instead of paying; the last retry pays', () =>
  withServer((s) => [s.challenge({ retryAfter: 1 }), s.ok()], async (s) => {
    const started = Date.now();
    assert.strictEqual((await ps.powFetch(s.url, { powShield: { preferWait: true } })).status, 200);
    assert.ok(Date.now() - started >= 900);
    assert.strictEqual(s.requests[1].headers['x-pow-challenge'], undefined);
  }));

test('preferWait pays a Retry-After beyond maxWaitMs', () =>
  withServer((s) => [s.challenge({ retryAfter: 3600 }), s.ok()], async (s) => {
    assert.strictEqual((await ps.powFetch(s.url, { powShield: { preferWait: true } })).status, 200);
    assert.ok(paid(s, 1, 8));
  }));

test('a 503 is handed back, or waited out with preferWait', () =>
  withServer((s) => [s.status(503, { 'Retry-After': '1' }), s.status(503, { 'Retry-After': '1' }), s.ok()], async (s) => {
    assert.strictEqual((await ps.powFetch(s.url)).status, 503);
    assert.strictEqual((await ps.powFetch(s.url, { powShield: { preferWait: true } })).status, 200);
  }));

test('an application\'s own 409 and a 429 without a challenge are handed back', () =>
  withServer((s) => [s.status(409, { 'Content-Type': 'application/json' }, '{"error":"conflict"}'), s.status(429)], async (s) => {
    assert.strictEqual((await ps.powFetch(s.url)).status, 409);
    assert.strictEqual((await ps.powFetch(s.url)).status, 429);
  }));

test('a token that cannot be sent back is a BadChallengeError before any work', () =>
  withServer((s) => [s.challenge({ inBody: true, token: `${makeToken({ salt: 'ab', difficulty: 1 })}\r\nX-Injected: 1` })], async (s) => {
    await assert.rejects(ps.powFetch(s.url), ps.BadChallengeError);
    assert.strictEqual(s.requests.length, 1);
  }));

test('the body and method are sent again; a stream body is refused', () =>
  withServer((s) => [s.challenge(), s.ok(), s.challenge()], async (s) => {
    await ps.powFetch(s.url, { method: 'POST', body: '{"item":42}', headers: { 'Content-Type': 'application/json' } });
    assert.deepStrictEqual(s.requests.map((r) => [r.method, r.body]), [['POST', '{"item":42}'], ['POST', '{"item":42}']]);
    const stream = new ReadableStream({ start(c) { c.enqueue(new TextEncoder().encode('x')); c.close(); } });
    await assert.rejects(ps.powFetch(s.url, { method: 'POST', body: stream, duplex: 'half' }), ps.PowShieldError);
  }));

test('withPowShield wraps any fetch-compatible function', () =>
  withServer((s) => [s.challenge(), s.ok()], async (s) => {
    const calls = [];
    const counting = (input, init) => {
      calls.push(new Headers(init.headers).get('X-PoW-Nonce'));
      return fetch(input, init);
    };
    const r = await ps.withPowShield(counting, { maxRetries: 1 })(s.url, { headers: { 'X-Api-Key': 'k' } });
    assert.strictEqual(r.status, 200);
    assert.strictEqual(calls.length, 2);
    assert.strictEqual(calls[0], null);
    assert.strictEqual(s.requests[1].headers['x-api-key'], 'k');
  }));

test('an AbortSignal stops a solve and the request', () =>
  withServer((s) => [s.challenge({ difficulty: 12 })], async (s) => {
    const ac = new AbortController();
    setTimeout(() => ac.abort(), 200);
    await assert.rejects(ps.powFetch(s.url, { signal: ac.signal, powShield: { maxSolveTimeMs: 0 } }), (e) => e.name === 'AbortError');
    assert.strictEqual(s.requests.length, 1);
  }));
