'use strict';
// The per-origin in-flight gate (at most 4 requests in flight per origin, n - 1
// for the server's default 5 strikes, until Remaining shows room) and the
// solution headers that never follow a redirect.
const test = require('node:test');
const assert = require('node:assert');

const ps = require('..');
const { Gate, originOf, remaining } = require('../lib/gate');
const { FakeServer, counting } = require('./fakeserver');

async function all(pay, url, count) {
  return Promise.all(Array.from({ length: count }, () => pay(url).then(async (r) => { await r.text(); return r.status; })));
}

test('origin is scheme, host and port; remaining is the lowest r= of RateLimit, else X-RateLimit-Remaining', () => {
  assert.strictEqual(originOf('http://API.example:80/x'), originOf('http://api.example/y'));
  assert.notStrictEqual(originOf('http://h/'), originOf('https://h/'));
  assert.strictEqual(remaining(new Headers({ RateLimit: '"a";r=7;t=3, "b";r=2;t=1', 'X-RateLimit-Remaining': '9' })), 2);
  assert.strictEqual(remaining(new Headers({ 'X-RateLimit-Remaining': ' 3 ' })), 3);
  assert.strictEqual(remaining(new Headers({ 'X-RateLimit-Remaining': '²' })), null);
});

test('the gate starts at n - 1 in flight; Remaining opens it, a 429 or Remaining 0 closes it', async () => {
  const gate = new Gate();
  const url = 'http://api.example/';
  const passes = await Promise.all([1, 2, 3, 4].map(() => gate.enter(url)));
  let fifth = false;
  const waiting = gate.enter(url).then((p) => { fifth = true; return p; });
  await new Promise((r) => setImmediate(r));
  assert.strictEqual(fifth, false, 'a 5th waits');
  passes[0].saw({ status: 200, headers: new Headers({ 'X-RateLimit-Remaining': '30' }) });
  assert.strictEqual(gate.allowed(url), 30);
  (await waiting).saw({ status: 429, headers: new Headers() });
  assert.strictEqual(gate.allowed(url), 4);
  passes[1].saw({ status: 200, headers: new Headers({ 'X-RateLimit-Remaining': '0' }) });
  assert.strictEqual(gate.allowed(url), 4);
});

test('a Promise.all of 20 through withPowShield has at most 4 in flight', async () => {
  const seen = await counting();
  try {
    assert.deepStrictEqual(await all(ps.withPowShield(fetch), seen.url, 20), Array(20).fill(200));
    assert.strictEqual(seen.most, 4);
  } finally {
    await seen.close();
  }
});

test('a Promise.all of 20 powFetch calls shares one gate: at most 4 in flight', async () => {
  const seen = await counting();
  try {
    assert.deepStrictEqual(await all(ps.powFetch, seen.url, 20), Array(20).fill(200));
    assert.strictEqual(seen.most, 4);
  } finally {
    await seen.close();
  }
});

test('Remaining lets more in flight', async () => {
  const seen = await counting('50');
  try {
    const pay = ps.withPowShield(fetch);
    await all(pay, seen.url, 1);
    await all(pay, seen.url, 30);
    assert.ok(seen.most > 4, `most in flight: ${seen.most}`);
  } finally {
    await seen.close();
  }
});

test('an aborted wait for the gate holds no place', async () => {
  const gate = new Gate();
  const url = 'http://api.example/';
  const passes = await Promise.all([1, 2, 3, 4].map(() => gate.enter(url)));
  const abort = new AbortController();
  const waiting = gate.enter(url, abort.signal);
  abort.abort(new Error('stop'));
  await assert.rejects(waiting, /stop/);
  passes.forEach((p) => p.release());
  assert.strictEqual(gate.inFlight(url), 0);
});

test('a paid request redirected to another origin does not send the solution there', async () => {
  const other = await counting();
  const s = await new FakeServer().start();
  s.script = [s.challenge(), s.status(302, { Location: other.url })];
  try {
    const r = await ps.powFetch(s.url);
    assert.strictEqual(r.status, 200);
    await r.text();
    assert.ok(s.requests[1].headers['x-pow-nonce'], 'the solution went to the URL that asked for it');
    assert.strictEqual(other.requests.length, 1);
    assert.strictEqual(other.requests[0]['x-pow-challenge'], undefined);
    assert.strictEqual(other.requests[0]['x-pow-nonce'], undefined);
  } finally {
    await s.close();
    await other.close();
  }
});

test('a paid POST redirected with 303 becomes a GET without its body, as fetch does', async () => {
  const s = await new FakeServer().start();
  s.script = [s.challenge(), s.status(303, { Location: '/after' }), s.ok('after')];
  try {
    const r = await ps.powFetch(s.url, { method: 'POST', body: 'a=1' });
    assert.strictEqual(await r.text(), 'after');
    assert.deepStrictEqual(s.requests.map((q) => [q.method, q.url]), [['POST', '/items'], ['POST', '/items'], ['GET', '/after']]);
    assert.strictEqual(s.requests[2].headers['x-pow-nonce'], undefined, 'a solution is spent once');
  } finally {
    await s.close();
  }
});
