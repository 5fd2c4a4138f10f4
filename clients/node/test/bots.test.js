'use strict';
// Signing as a known bot (Web Bot Auth): the draft's example signature made
// byte for byte (Ed25519 is deterministic) as the Rust and Python clients
// make it; withPowShield and withPowShieldAxios sign every send afresh, or,
// with a signer made whenAsked, send a request again signed once its answer
// asks (Accept-Signature), and sign that origin from then on.
const test = require('node:test');
const assert = require('node:assert');
const crypto = require('node:crypto');

const ps = require('..');
const { FakeServer, paid, unpaid } = require('./fakeserver');

// RFC 9421 B.1.4's test key, which the draft's examples sign with.
const RFC_KEY = {
  kty: 'OKP', crv: 'Ed25519', d: 'n4Ni-HpISpVObnQMW0wOhCKROaIKqKtW_2ZYb2p9KcU', x: 'JrQLj5P_89iXES9-vFgrIy29clF9CC_oPPsw3c5D0bs',
};
const KEYID = 'poqkLGiymh_W0uP6PZFw-dvez3QJT5SolqXBCW38r0U';
const INVITATION = 'sig1=("@authority");created;expires;alg="ed25519";tag="web-bot-auth"';

let axios = null;
try {
  axios = require('axios');
} catch {
  axios = null;
}

async function withServer(script, fn) {
  const server = await new FakeServer().start();
  server.script = script(server);
  try {
    return await fn(server);
  } finally {
    await server.close();
  }
}

/** Whether request `i` carries a signature of RFC_KEY for `authority` that verifies; its nonce. */
function verified(server, i) {
  const h = server.requests[i].headers;
  if (!h['signature-input'] || !h.signature) return null;
  const params = h['signature-input'].slice('sig1='.length);
  const base = `"@authority": ${h.host}\n"@signature-params": ${params}`;
  const signature = Buffer.from(h.signature.slice('sig1=:'.length, -1), 'base64');
  const key = crypto.createPublicKey({ key: { kty: 'OKP', crv: 'Ed25519', x: RFC_KEY.x }, format: 'jwk' });
  if (!crypto.verify(null, Buffer.from(base), key, signature)) return null;
  return /nonce="([^"]*)"/.exec(params)[1];
}

test('the draft\'s example is made byte for byte, and the keyid is the RFC 7638 thumbprint', () => {
  const bot = new ps.BotSigner(RFC_KEY);
  assert.strictEqual(bot.keyid, KEYID);
  const nonce = 'mYotfW3CUjI68sbGw6oKd7kyXqPjZEtU8xFPGWFrqOAf5qC6MDe3pys3SWWCudB0MvwslHy32WXUpkR7u0lt/w==';
  const h = bot.headers('https://example.com/path/to/resource', { created: 1735689600, expires: 1735693200, nonce });
  assert.strictEqual(h['Signature-Input'], `sig1=("@authority");created=1735689600;keyid="${KEYID}";alg="ed25519";`
    + `expires=1735693200;nonce="${nonce}";tag="web-bot-auth"`);
  assert.strictEqual(h.Signature,
    'sig1=:+NA/cssf4Y2bQTMTkyvTGRCaVzp9quyUevdwwMtMOWhhOOZ2T1subBj0BtvdnrpDEuwSAbiTeElXDzHL3WWKCw==:');
  assert.strictEqual(h['Signature-Agent'], undefined);
});

test('a Signature-Agent is signed as the Rust and Python clients sign it', () => {
  const bot = new ps.BotSigner(JSON.stringify(RFC_KEY), { signatureAgent: 'https://signature-agent.test' });
  const h = bot.headers('https://example.com/path', { created: 1735689600, expires: 1735689660, nonce: 'test-nonce' });
  assert.strictEqual(h['Signature-Agent'], 'sig1="https://signature-agent.test"');
  assert.strictEqual(h.Signature,
    'sig1=:A8i9MS0+Q4R/QsFYO9I1dkLCtJwdunZgw3S7lQueUEl4epGJd/ZoDHHYqf0PSLrqtoB+1JneDUphNRkr81S5Ag==:');
});

test('a public key, a mismatched x or a lifetime out of range cannot sign', () => {
  assert.throws(() => new ps.BotSigner({ kty: 'OKP', crv: 'Ed25519', x: RFC_KEY.x }), TypeError);
  assert.throws(() => new ps.BotSigner({ ...RFC_KEY, x: `AAAA${RFC_KEY.x.slice(4)}` }), TypeError);
  assert.throws(() => new ps.BotSigner(RFC_KEY, { lifetime: 0 }), RangeError);
  assert.throws(() => ps.withPowShield(fetch, { bot: {} }), TypeError);
});

test('an Accept-Signature asks for web-bot-auth only with its tag and the components signed', () => {
  for (const [value, asks] of [
    [INVITATION, true],
    ['sig1=("@authority");tag="web-bot-auth"', true],
    ['a=("@authority" "signature-agent";key="sig1");created;tag="web-bot-auth"', true],
    ['x=("@method");tag="app", y=("@authority");tag="web-bot-auth"', true],
    ['sig1=("@authority");tag="other"', false],
    ['sig1=("@authority")', false],
    ['sig1=("@authority" "@method");tag="web-bot-auth"', false],
    ['sig1=("@authority");alg="rsa-pss-sha512";tag="web-bot-auth"', false],
    ['sig1="@authority";tag="web-bot-auth"', false],
    ['sig1=("@authority";tag="web-bot-auth"', false],
    ['sig1=("@authority");tag="web-bot-auth",', false],
    ['', false],
    [null, false],
  ]) {
    assert.strictEqual(ps.asksWebBotAuth(value), asks, value);
  }
});

test('a bot signs every send afresh, and an invitation changes nothing', () =>
  withServer((s) => [s.challenge({ headers: { 'Accept-Signature': INVITATION } }), s.ok()], async (s) => {
    const pay = ps.withPowShield(fetch, { bot: new ps.BotSigner(RFC_KEY) });
    assert.strictEqual((await pay(s.url)).status, 200);
    const first = verified(s, 0);
    const second = verified(s, 1);
    assert.ok(first && second, 'both sends signed');
    assert.notStrictEqual(first, second, 'a fresh nonce each send');
    assert.ok(paid(s, 1, 8), 'signed already: the 429 is paid');
  }));

test('a signer whenAsked sends the request again signed, then signs the origin from the start', () =>
  withServer((s) => [s.challenge({ headers: { 'Accept-Signature': INVITATION } }), s.ok(), s.ok()], async (s) => {
    const bot = new ps.BotSigner(RFC_KEY, { whenAsked: true });
    const pay = ps.withPowShield(fetch, { bot, maxRetries: 0 });
    assert.strictEqual((await pay(s.url)).status, 200);
    assert.strictEqual((await pay(s.url)).status, 200);
    assert.strictEqual(s.requests[0].headers['signature-input'], undefined);
    assert.ok(verified(s, 1), 'sent again, signed');
    assert.ok(unpaid(s, 1), 'signing instead of paying');
    assert.ok(verified(s, 2), 'the origin is signed from now on');
  }));

test('a signer whenAsked pays a 429 that does not ask', () =>
  withServer((s) => [s.challenge(), s.ok()], async (s) => {
    const pay = ps.withPowShield(fetch, { bot: new ps.BotSigner(RFC_KEY, { whenAsked: true }) });
    assert.strictEqual((await pay(s.url)).status, 200);
    assert.ok(s.requests.every((r) => r.headers['signature-input'] === undefined));
    assert.ok(paid(s, 1, 8));
  }));

test('each redirect hop is signed afresh', () =>
  withServer((s) => [s.status(302, { Location: '/elsewhere' }), s.ok()], async (s) => {
    const pay = ps.withPowShield(fetch, { bot: new ps.BotSigner(RFC_KEY) });
    const r = await pay(s.url);
    assert.strictEqual(r.status, 200);
    assert.strictEqual(s.requests[1].url, '/elsewhere');
    const [first, second] = [verified(s, 0), verified(s, 1)];
    assert.ok(first && second && first !== second);
  }));

test('axios: a bot signs every send; a signer whenAsked sends again signed once asked', {
  skip: !axios && 'axios is not installed (make node-dev: npm ci in clients/node)',
}, () =>
  withServer((s) => [s.challenge(), s.ok(), s.challenge({ headers: { 'Accept-Signature': INVITATION } }), s.ok()], async (s) => {
    const always = ps.withPowShieldAxios(axios.create(), { bot: new ps.BotSigner(RFC_KEY) });
    assert.strictEqual((await always.get(s.url)).status, 200);
    assert.ok(verified(s, 0) && verified(s, 1) && paid(s, 1, 8));
    const asked = ps.withPowShieldAxios(axios.create(), { bot: new ps.BotSigner(RFC_KEY, { whenAsked: true }) });
    assert.strictEqual((await asked.get(s.url)).status, 200);
    assert.strictEqual(s.requests[2].headers['signature-input'], undefined);
    assert.ok(verified(s, 3) && unpaid(s, 3));
  }));
