'use strict';
// The native search (native/, built by `make node-native` into
// prebuilds/<platform tag>/; skipped where it is not built) judges the
// protocol's test vectors as the document does and finds the same smallest
// nonce as the node:crypto search; the solver's worker threads load it too;
// it is loaded only on the platform it was built for.
const test = require('node:test');
const assert = require('node:assert');
const fs = require('node:fs');
const path = require('node:path');
const { spawnSync } = require('node:child_process');

const { nativeAddon, platformTag, libcOf } = require('../lib/native');
const { RangeSearch } = require('../lib/wasm');
const { search: searchJs } = require('../lib/work');
const { solve, engineName } = require('..');
const { zeroBits } = require('./fakeserver');

const addon = nativeAddon();
const skip = !addon && 'not built (make node-native)';

function vectors(block) {
  const doc = fs.readFileSync(path.join(__dirname, '../../../docs/protocol.md'), 'utf8');
  // A search tries only nonces below 2^53 written without leading zeros ("060803" is none).
  return doc.split(`\`\`\`${block}\n`)[1].split('```')[0].trim().split('\n').map((line) => {
    const [salt, nonce, price, , valid] = line.split(' ');
    return { line, salt, digits: nonce, nonce: Number(nonce), price: Number(price), valid: valid === 'yes' };
  }).filter((v) => Number.isSafeInteger(v.nonce) && String(v.nonce) === v.digits);
}

test('the native search judges the hex and bits test vectors as docs/protocol.md does', { skip }, () => {
  for (const v of vectors('pow-shield-vectors')) {
    assert.strictEqual(addon.search(v.salt, 4 * v.price, v.nonce, v.nonce + 1) === v.nonce, v.valid, v.line);
  }
  for (const v of vectors('pow-shield-bits-vectors')) {
    assert.strictEqual(addon.search(v.salt, v.price, v.nonce, v.nonce + 1) === v.nonce, v.valid, v.line);
  }
});

test('the native search finds the smallest nonce the node:crypto search finds', { skip }, () => {
  for (const len of [1, 16, 32, 45, 55, 56, 64, 65, 100, 200]) {
    const salt = 'a1b2c3d4e5f60718'.repeat(13).slice(0, len);
    for (const bits of [1, 3, 8, 11]) {
      for (const from of [0, 7, 999, 123456]) {
        const want = searchJs(salt, bits, from, 1, 1e7);
        assert.strictEqual(addon.search(salt, bits, from, from + 1e7), Number(want), `salt of ${len}, ${bits} bits`);
        assert.strictEqual(new RangeSearch(salt, bits, null, addon).run(from, from + 1e7), want);
      }
    }
  }
});

test('arguments the native search does not take are -2, and the other searches run', { skip }, () => {
  assert.strictEqual(addon.search('ab', 0, 0, 10), -2);
  assert.strictEqual(addon.search('ab', 65, 0, 10), -2);
  assert.strictEqual(addon.search('x'.repeat(5000), 4, 0, 10), -2);
  const long = 'x'.repeat(5000);
  assert.strictEqual(new RangeSearch(long, 4, null, addon).run(0, 1000), searchJs(long, 4, 0, 1, 1000));
});

test('the solver\'s threads solve with the native search', { skip }, async () => {
  assert.strictEqual(engineName(), 'native');
  const salt = '6c17a261001047c8b3e83591c3269c2e';
  const nonce = await solve(salt, { bits: 16 }, { threads: 2 });
  assert.ok(zeroBits(salt, nonce) >= 16);
});

test('the platform tag names the OS, the architecture and, on Linux, the C library', () => {
  assert.strictEqual(platformTag('linux', 'x64', 'gnu'), 'linux-x64-gnu');
  assert.strictEqual(platformTag('linux', 'x64', 'musl'), 'linux-x64-musl');
  assert.strictEqual(platformTag('linux', 'arm64', 'gnu'), 'linux-arm64-gnu');
  assert.strictEqual(platformTag('darwin', 'arm64', null), 'darwin-arm64');
  if (process.platform === 'linux') assert.ok(['gnu', 'musl'].includes(libcOf()));
});

/** engineName() in a process that takes itself for another platform (a preload changes what Node reports). */
function engineAs(preload) {
  const r = spawnSync(process.execPath, ['-e', `${preload}; console.log(require(${JSON.stringify(path.join(__dirname, '..'))}).engineName())`],
    { encoding: 'utf8', env: { ...process.env, POW_SHIELD_SOLVER: '' } });
  assert.strictEqual(r.status, 0, r.stderr);
  return r.stdout.trim();
}

test('the linux-x64 glibc addon is not loaded on another architecture or on musl: the WebAssembly search runs', { skip }, () => {
  assert.strictEqual(engineAs(''), 'native');
  assert.strictEqual(engineAs("Object.defineProperty(process, 'arch', { value: 'arm64' })"), 'wasm');
  assert.strictEqual(engineAs(`const fs = require('node:fs'); const read = fs.readFileSync;
    fs.readFileSync = (f, ...a) => (f === '/usr/bin/ldd' ? 'musl libc (x86_64)' : read(f, ...a))`), 'wasm');
});
