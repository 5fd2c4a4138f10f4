'use strict';
// withPowShieldAxios against a scripted server: an axios instance pays as
// withPowShield's fetch does (a 429, ahead, through the gate, paced), a
// block rejects with BlockedError, and what axios does without pow-shield
// (validateStatus, the application's interceptors and transforms) is left
// as it was. axios is the package's optional peer, installed for the tests
// by `make node-dev` (npm ci); skipped without it.
const test = require('node:test');
const assert = require('node:assert');
const path = require('node:path');
const { Readable } = require('node:stream');
const { spawnSync } = require('node:child_process');

const ps = require('..');
const { urlOf } = require('../lib/axios');
const { FakeServer, counting, paid, paidAhead, unpaid } = require('./fakeserver');

let axios = null;
try {
  axios = require('axios');
} catch {
  axios = null;
}
const skip = !axios && 'axios is not installed (make node-dev: npm ci in clients/node)';

async function withServer(script, fn) {
  const server = await new FakeServer().start();
  server.script = script(server);
  try {
    return await fn(server);
  } finally {
    await server.close();
  }
}

test('axios: a 429 is paid and the request sent again; the application sees the 200 once, transformed', { skip }, () =>
  withServer((s) => [s.challenge(), s.status(200, { 'Content-Type': 'application/json' }, '{"items":[1,2]}')], async (s) => {
    const api = ps.withPowShieldAxios(axios.create());
    const seen = [];
    api.interceptors.response.use((r) => { seen.push(r.status); return r; });
    const r = await api.get(s.url);
    assert.strictEqual(r.status, 200);
    assert.deepStrictEqual(r.data, { items: [1, 2] });
    assert.deepStrictEqual(seen, [200], 'the 429 in between never reaches the application');
    assert.ok(unpaid(s, 0));
    assert.ok(paid(s, 1, 8));
  }));

test('axios: the next challenge is paid ahead: the next request carries its solution, no 429', { skip }, () =>
  withServer((s) => [s.ahead(), s.ahead(), s.ahead()], async (s) => {
    const api = ps.withPowShieldAxios(axios.create({ baseURL: new URL('/', s.url).href }));
    for (let i = 0; i < 3; i++) assert.strictEqual((await api.get('/items')).status, 200);
    assert.strictEqual(s.requests.length, 3, 'one round trip each');
    assert.ok(unpaid(s, 0));
    assert.ok(paidAhead(s, 1, 0));
    assert.ok(paidAhead(s, 2, 1));
  }));

test('axios: payAhead false sends no solution ahead; the 429 path pays', { skip }, () =>
  withServer((s) => [s.ahead(), s.challenge(), s.ok()], async (s) => {
    const api = ps.withPowShieldAxios(axios.create(), { payAhead: false });
    await api.get(s.url);
    await api.get(s.url);
    assert.ok(unpaid(s, 1));
    assert.ok(paid(s, 2, 8, 0));
  }));

test('axios: with preferWait a 429 with Retry-After is slept, then sent again unpaid', { skip }, () =>
  withServer((s) => [s.challenge({ retryAfter: 1 }), s.ok()], async (s) => {
    const api = ps.withPowShieldAxios(axios.create(), { preferWait: true });
    assert.strictEqual((await api.get(s.url)).status, 200);
    assert.strictEqual(s.requests.length, 2);
    assert.ok(unpaid(s, 1));
  }));

test('axios: a block rejects with BlockedError carrying the axios response, nothing resent', { skip }, () =>
  withServer((s) => [s.blocked(), s.blocked('banned')], async (s) => {
    const api = ps.withPowShieldAxios(axios.create());
    await assert.rejects(api.get(s.url), (e) => e instanceof ps.BlockedError && !(e instanceof ps.BannedError)
      && e.response.status === 403 && e.response.data === 'Blocked by Circuit Breaker'
      && e.response.headers.get('x-pow-shield') === 'blocked');
    await assert.rejects(api.get(s.url), ps.BannedError);
    assert.strictEqual(s.requests.length, 2);
  }));

test('axios: an answer the instance\'s validateStatus refuses rejects with axios\'s own error, as without pow-shield', { skip }, () =>
  withServer((s) => [s.status(404, { 'Content-Type': 'application/json' }, '{"missing":true}'), s.status(404)], async (s) => {
    const api = ps.withPowShieldAxios(axios.create());
    await assert.rejects(api.get(s.url), (e) => axios.isAxiosError(e) && !(e instanceof ps.PowShieldError)
      && e.response.status === 404 && e.response.data.missing === true && e.config.url === s.url);
    const lenient = ps.withPowShieldAxios(axios.create({ validateStatus: () => true }));
    assert.strictEqual((await lenient.get(s.url)).status, 404);
    assert.strictEqual(s.requests.length, 2);
  }));

test('axios: a challenged POST is sent again with the same body and the solution', { skip }, () =>
  withServer((s) => [s.challenge(), s.ok()], async (s) => {
    const api = ps.withPowShieldAxios(axios.create());
    await api.post(s.url, { a: 1 });
    assert.deepStrictEqual(s.requests.map((q) => [q.method, q.body, q.headers['content-type']]),
      [['POST', '{"a":1}', 'application/json'], ['POST', '{"a":1}', 'application/json']]);
    assert.ok(paid(s, 1, 8));
  }));

test('axios: a challenged stream body is not sent twice: PowShieldError', { skip }, () =>
  withServer((s) => [s.challenge()], async (s) => {
    const api = ps.withPowShieldAxios(axios.create());
    await assert.rejects(api.post(s.url, Readable.from(['a=1'])), (e) => e instanceof ps.PowShieldError && e.response.status === 429);
    assert.strictEqual(s.requests.length, 1);
  }));

test('axios: a paid request redirected to another origin does not send the solution there', { skip }, async () => {
  const other = await counting();
  const s = await new FakeServer().start();
  s.script = [s.challenge(), s.status(302, { Location: other.url })];
  try {
    const r = await ps.withPowShieldAxios(axios.create()).get(s.url);
    assert.strictEqual(r.status, 200);
    assert.ok(s.requests[1].headers['x-pow-nonce'], 'the solution went to the URL that asked for it');
    assert.strictEqual(other.requests.length, 1);
    assert.strictEqual(other.requests[0]['x-pow-challenge'], undefined);
    assert.strictEqual(other.requests[0]['x-pow-nonce'], undefined);
  } finally {
    await s.close();
    await other.close();
  }
});

test('axios: a Promise.all of 20 has at most 4 in flight per origin', { skip }, async () => {
  const seen = await counting();
  try {
    const api = ps.withPowShieldAxios(axios.create());
    const rs = await Promise.all(Array.from({ length: 20 }, () => api.get(seen.url)));
    assert.deepStrictEqual(rs.map((r) => r.status), Array(20).fill(200));
    assert.strictEqual(seen.most, 4);
  } finally {
    await seen.close();
  }
});

test('axios: with pace, the request after Remaining 0 waits for the reset and pays nothing', { skip }, () =>
  withServer((s) => [s.ahead({ resetIn: 1 }), s.ahead({ next: false, remaining: 1 })], async (s) => {
    const api = ps.withPowShieldAxios(axios.create(), { pace: true });
    await api.get(s.url);
    await api.get(s.url);
    assert.strictEqual(s.requests.length, 2);
    assert.ok(unpaid(s, 1), 'waited: the next challenge of the first answer was not paid');
  }));

test('axios: a header the application\'s interceptor sets scopes the solution, as a credential', { skip }, () =>
  withServer((s) => [s.ahead(), s.ok(), s.ok()], async (s) => {
    const api = ps.withPowShieldAxios(axios.create());
    let token = 'Bearer a';
    api.interceptors.request.use((config) => { config.headers.set('Authorization', token); return config; });
    await api.get(s.url);
    token = 'Bearer b';
    await api.get(s.url);
    token = 'Bearer a';
    await api.get(s.url);
    assert.ok(unpaid(s, 1), 'another credential');
    assert.ok(paidAhead(s, 2, 0), 'the same credential');
    assert.strictEqual(s.requests[2].headers.authorization, 'Bearer a');
  }));

test('axios: the fetch adapter pays the same way', { skip }, () =>
  withServer((s) => [s.challenge(), s.ok('items')], async (s) => {
    const api = ps.withPowShieldAxios(axios.create({ adapter: 'fetch' }));
    const r = await api.get(s.url);
    assert.strictEqual(r.data, 'items');
    assert.ok(paid(s, 1, 8));
  }));

test('axios: an aborted request rejects as axios cancels, and holds no place in the gate', { skip }, () =>
  withServer((s) => [s.challenge({ difficulty: 12 })], async (s) => {
    const api = ps.withPowShieldAxios(axios.create());
    const abort = new AbortController();
    const pending = api.get(s.url, { signal: abort.signal });
    while (s.requests.length === 0) await new Promise((r) => setTimeout(r, 5));
    abort.abort();
    await assert.rejects(pending, (e) => axios.isCancel(e));
  }));

test('axios: baseURL and url join as axios joins them', () => {
  assert.strictEqual(urlOf({ baseURL: 'http://h/api/', url: '/items' }), 'http://h/api/items');
  assert.strictEqual(urlOf({ baseURL: 'http://h/api', url: 'items' }), 'http://h/api/items');
  assert.strictEqual(urlOf({ baseURL: 'http://h/api', url: 'http://o/x' }), 'http://o/x');
  assert.strictEqual(urlOf({ baseURL: 'http://h/api', url: 'http://o/x', allowAbsoluteUrls: false }), 'http://h/api/http://o/x');
  assert.strictEqual(urlOf({ url: 'http://o/x' }), 'http://o/x');
});

test('withPowShieldAxios refuses what is not an axios instance', () => {
  assert.throws(() => ps.withPowShieldAxios(fetch), TypeError);
  assert.throws(() => ps.withPowShieldAxios(undefined), TypeError);
});

test('the package does not load axios: it is an optional peer', () => {
  const r = spawnSync(process.execPath, ['-e', `
    const ps = require(${JSON.stringify(path.join(__dirname, '..'))});
    if (typeof ps.withPowShieldAxios !== 'function') process.exit(2);
    const sep = require('node:path').sep;
    const loaded = Object.keys(require.cache).filter((f) => f.includes(sep + 'node_modules' + sep + 'axios' + sep));
    console.log(loaded.join(' '));
  `], { encoding: 'utf8' });
  assert.strictEqual(r.status, 0, r.stderr);
  assert.strictEqual(r.stdout.trim(), '');
});
