'use strict';
// Equi-X challenges (docs/protocol.md §5, "Equi-X"): the native addon and
// the WebAssembly solver (lib/equix.wasm) each find the document's vectors
// (the smallest paying nonce, its first paying solution), the hash check
// agrees with every row, a challenge says its algorithm, and where no
// Equi-X solver runs, solveEquix rejects at once naming the algorithm.
const test = require('node:test');
const assert = require('node:assert');
const fs = require('node:fs');
const path = require('node:path');
const { spawnSync } = require('node:child_process');

const { EquixSearch, equixModule, paysBits } = require('../lib/equix');
const { nativeAddon } = require('../lib/native');
const { readChallenge } = require('..');

function vectors() {
  const doc = fs.readFileSync(path.join(__dirname, '../../../docs/protocol.md'), 'utf8');
  return doc.split('```pow-shield-equix-vectors\n')[1].split('```')[0].trim().split('\n').map((line) => {
    const [salt, nonce, bits, solution, , valid] = line.split(' ');
    return { line, salt, nonce, bits: Number(bits), solution, valid: valid === 'yes' };
  });
}

test('the hash rule of every Equi-X vector is judged as the document says (where the solution is Equi-X\'s)', () => {
  for (const v of vectors()) {
    // Row "12 ... no" has the bits: only Equi-X itself refuses it.
    if (v.nonce !== '12') assert.strictEqual(paysBits(v.salt, v.nonce, v.solution, v.bits), v.valid, v.line);
  }
});

const engines = [
  ['native', () => nativeAddon() && typeof nativeAddon().equixSearch === 'function', undefined, null],
  ['wasm', () => equixModule() !== null, equixModule(), null],
];

for (const [name, available, module, forced] of engines) {
  test(`the ${name} solver finds each valid vector: the smallest nonce, its first paying solution`,
    { skip: !available() && `no ${name} Equi-X solver here (make node-native, make node-wasm)` }, () => {
      for (const v of vectors().filter((row) => row.valid)) {
        const search = new EquixSearch(v.salt, v.bits, module, name === 'native' ? undefined : forced);
        assert.deepStrictEqual(search.run(0, Number(v.nonce) + 1), { nonce: v.nonce, solution: v.solution }, v.line);
      }
    });
}

test('a challenge says its algorithm: the token\'s alg, else sha256', async () => {
  const token = (payload) => `${Buffer.from(JSON.stringify(payload)).toString('base64url')}.${'A'.repeat(43)}`;
  const base = { ip: '127.0.0.1', ts: 1, difficulty: 1, salt: 'ab'.repeat(16), bits: 2 };
  const of = async (payload) => readChallenge(new Response('{}', {
    status: 429, headers: { 'X-PoW-Challenge': token(payload) },
  }));
  assert.strictEqual((await of({ ...base, alg: 'equix' })).algorithm, 'equix');
  assert.strictEqual((await of(base)).algorithm, 'sha256');
  await assert.rejects(of({ ...base, alg: 'argon2' }), /argon2/);
});

test('without an Equi-X solver, solveEquix rejects at once naming the algorithm', () => {
  const code = `require(${JSON.stringify(path.join(__dirname, '..'))}).solveEquix('ab'.repeat(16), 2)
    .then(() => console.log('solved'), (e) => console.log(e.name, e.message))`;
  const r = spawnSync(process.execPath, ['-e', code], {
    env: { ...process.env, POW_SHIELD_SOLVER: 'js' }, encoding: 'utf8', timeout: 30_000,
  });
  assert.match(r.stdout, /^UnsolvableError the server asks for equix proof of work/, r.stderr);
});
