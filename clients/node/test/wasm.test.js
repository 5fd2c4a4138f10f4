'use strict';
// The WebAssembly search (lib/search.wasm, built from wasm/src/) judges the
// protocol's test vectors as the document does, and finds the same
// smallest nonce as the node:crypto search, for salts of every length
// around SHA-256's block boundaries.
const test = require('node:test');
const assert = require('node:assert');
const fs = require('node:fs');
const path = require('node:path');
const { spawnSync } = require('node:child_process');

const { WasmSearch, RangeSearch, wasmModule, engineName } = require('../lib/wasm');
const { nativeAddon } = require('../lib/native');
const { search: searchJs } = require('../lib/work');
const { engineName: exported } = require('..');

const compiled = wasmModule();
const skip = !compiled && 'this Node has no WebAssembly SIMD';

function vectors(block) {
  const doc = fs.readFileSync(path.join(__dirname, '../../../docs/protocol.md'), 'utf8');
  // A search tries only nonces below 2^53 written without leading zeros ("060803" is none).
  return doc.split(`\`\`\`${block}\n`)[1].split('```')[0].trim().split('\n').map((line) => {
    const [salt, nonce, price, , valid] = line.split(' ');
    return { line, salt, digits: nonce, nonce: Number(nonce), price: Number(price), valid: valid === 'yes' };
  }).filter((v) => Number.isSafeInteger(v.nonce) && String(v.nonce) === v.digits);
}

/** The raw module's answer for one nonce: no node:crypto confirmation. */
function wasmJudges(salt, nonce, bits) {
  const w = new WasmSearch(compiled);
  assert.ok(w.prepare(salt, bits));
  return w.search(nonce, nonce + 1) === nonce;
}

test('the solver runs the native search where it is built, else the WebAssembly one where it can', () => {
  assert.strictEqual(engineName(), nativeAddon() ? 'native' : compiled ? 'wasm' : 'js');
  assert.strictEqual(exported(), engineName());
});

test('the WebAssembly search judges the hex and bits test vectors as docs/protocol.md does', { skip }, () => {
  const hex = vectors('pow-shield-vectors');
  const bits = vectors('pow-shield-bits-vectors');
  assert.ok(hex.length >= 15);
  assert.ok(bits.length >= 14);
  for (const v of hex) assert.strictEqual(wasmJudges(v.salt, v.nonce, 4 * v.price), v.valid, v.line);
  for (const v of bits) assert.strictEqual(wasmJudges(v.salt, v.nonce, v.price), v.valid, v.line);
});

test('the WebAssembly search finds the smallest nonce the node:crypto search finds', { skip }, () => {
  const w = new WasmSearch(compiled);
  for (const len of [1, 16, 31, 32, 33, 45, 55, 56, 63, 64, 65, 100, 119, 128, 200]) {
    const salt = 'a1b2c3d4e5f60718'.repeat(13).slice(0, len);
    for (const bits of [1, 3, 8, 11]) {
      // A salt whose last block has no room for a digit is left to node:crypto.
      assert.strictEqual(w.prepare(salt, bits), len % 64 < 55, `salt of ${len}`);
      for (const from of [0, 7, 96, 999, 9998, 123456]) {
        const want = searchJs(salt, bits, from, 1, 1e7);
        const where = `salt of ${len}, ${bits} bits, from ${from}`;
        if (len % 64 < 55) assert.strictEqual(w.search(from, from + 1e7), Number(want), where);
        assert.strictEqual(new RangeSearch(salt, bits, compiled, null).run(from, from + 1e7), want, where);
      }
    }
  }
});

test('a range with no solution is -1, and the end of a range is not searched', { skip }, () => {
  const w = new WasmSearch(compiled);
  const salt = '6c17a261001047c8b3e83591c3269c2e';
  assert.ok(w.prepare(salt, 15));
  assert.strictEqual(w.search(0, 37477), -1); // 37477 is the first with 15 bits
  assert.strictEqual(w.search(0, 37478), 37477);
  assert.strictEqual(w.search(37477, 37478), 37477);
});

test('nonces too long for one block after a long salt fall back to node:crypto', { skip }, () => {
  // 50 salt bytes leave room for 5 digits in the last block.
  const salt = 'x'.repeat(50);
  const w = new WasmSearch(compiled);
  assert.ok(w.prepare(salt, 4));
  assert.strictEqual(w.search(100000, 100010), -2);
  const want = searchJs(salt, 4, 99990, 1, 1000);
  assert.strictEqual(new RangeSearch(salt, 4, compiled, null).run(99990, 100990), want);
});

test('POW_SHIELD_SOLVER=js makes the solver use node:crypto, =wasm the WebAssembly search', () => {
  const engine = (forced) => spawnSync(process.execPath, ['-e', 'console.log(require(".").engineName())'], {
    cwd: path.join(__dirname, '..'), env: { ...process.env, POW_SHIELD_SOLVER: forced }, encoding: 'utf8',
  }).stdout.trim();
  assert.strictEqual(engine('js'), 'js');
  assert.strictEqual(engine('wasm'), compiled ? 'wasm' : 'js');
});
