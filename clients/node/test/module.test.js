'use strict';
// Against the real module (t/pow_shield_node.t starts nginx and sets
// POW_SHIELD_TEST_BASE): the client pays its way through, waits with
// preferWait, stops when blocked and honours its bound. Skipped alone.
const test = require('node:test');
const assert = require('node:assert');

const { powFetch, withPowShield, BlockedError, SolveTimeoutError } = require('..');

const BASE = process.env.POW_SHIELD_TEST_BASE;
const skip = !BASE && 'POW_SHIELD_TEST_BASE is not set (run t/pow_shield_node.t)';

const as = (client, init = {}) => ({ ...init, headers: { 'X-Client': client, ...(init.headers || {}) } });
const plain = (uri, client) => fetch(BASE + uri, as(client)).then(async (r) => { await r.arrayBuffer(); return r.status; });

test('over the limit, powFetch pays the 429 and the request passes as solved', { skip }, async () => {
  assert.strictEqual(await plain('/api/data.json', 'node-pay'), 200);
  const r = await powFetch(BASE + '/api/data.json', as('node-pay'));
  assert.strictEqual(r.status, 200);
  assert.strictEqual(r.headers.get('X-Result'), 'solved');
  assert.deepStrictEqual(await r.json(), { dir: 'api' });
});

test('a client that asks for problem+json pays the same way', { skip }, async () => {
  await plain('/api/data.json', 'node-problem');
  const r = await powFetch(BASE + '/api/data.json', as('node-problem', { headers: { Accept: 'application/problem+json' } }));
  assert.strictEqual(r.headers.get('X-Result'), 'solved');
});

test('withPowShield around fetch pays a POST with its body', { skip }, async () => {
  await plain('/echo/', 'node-post');
  const f = withPowShield(fetch);
  const r = await f(BASE + '/echo/', as('node-post', { method: 'POST', body: 'a=1', headers: { 'Content-Type': 'text/plain' } }));
  assert.strictEqual(r.status, 200);
  assert.strictEqual(r.headers.get('X-Result'), 'solved');
});

test('preferWait waits Retry-After instead of paying', { skip }, async () => {
  assert.strictEqual(await plain('/fast/data.json', 'node-wait'), 200);
  const r = await powFetch(BASE + '/fast/data.json', as('node-wait', { powShield: { preferWait: true } }));
  assert.strictEqual(r.status, 200);
  assert.strictEqual(r.headers.get('X-Result'), 'pass');
});

test('the open circuit breaker throws BlockedError', { skip }, async () => {
  const seen = [];
  for (let i = 0; i < 3; i++) seen.push(await plain('/red/data.json', 'node-red'));
  assert.deepStrictEqual(seen, [200, 429, 429]);
  await assert.rejects(powFetch(BASE + '/red/data.json', as('node-red')),
    (e) => e instanceof BlockedError && e.response.status === 403);
});

test('a difficulty-12 challenge gives up at maxSolveTimeMs, nothing sent after it', { skip }, async () => {
  assert.strictEqual(await plain('/hard/data.json', 'node-hard'), 200);
  const started = Date.now();
  await assert.rejects(powFetch(BASE + '/hard/data.json', as('node-hard', { powShield: { maxSolveTimeMs: 500 } })),
    SolveTimeoutError);
  assert.ok(Date.now() - started < 20_000);
});
