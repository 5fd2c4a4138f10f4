'use strict';
// The solver: the hash rule of docs/protocol.md §5 (its test vectors), in
// hex zeros and in bits, on worker threads, bounded and cancellable.
const test = require('node:test');
const assert = require('node:assert');
const fs = require('node:fs');
const path = require('node:path');

const { solve, isSolution, SolveTimeoutError, TooDifficultError, UnsolvableError, DEFAULT_MAX_SOLVE_TIME_MS } = require('..');
const { zeroBits } = require('./fakeserver');

const SALT = '6c17a261001047c8b3e83591c3269c2e';

test('the protocol test vectors are judged as the document says', () => {
  const doc = fs.readFileSync(path.join(__dirname, '../../../docs/protocol.md'), 'utf8');
  const block = doc.split('```pow-shield-vectors\n')[1].split('```')[0].trim().split('\n');
  assert.strictEqual(block.length, 20);
  for (const line of block) {
    const [salt, nonce, difficulty, , valid] = line.split(' ');
    assert.strictEqual(isSolution(salt, nonce, 4 * Number(difficulty)), valid === 'yes', line);
  }
});

test('a hex difficulty is solved for 4 bits per digit', async () => {
  for (const d of [1, 2, 3, 4]) {
    const nonce = await solve(SALT, d);
    assert.ok(zeroBits(SALT, nonce) >= 4 * d, `difficulty ${d}: ${nonce}`);
  }
});

test('a difficulty in bits is solved for exactly those bits, on worker threads too', async () => {
  for (const bits of [1, 5, 10, 13, 14]) {
    const nonce = await solve(SALT, { bits }, { threads: 2 });
    assert.ok(zeroBits(SALT, nonce) >= bits, `${bits} bits: ${nonce}`);
  }
  // One thread finds the smallest nonce meeting 13 bits, not 16.
  const n = await solve(SALT, { bits: 13 }, { threads: 1 });
  for (let m = 0; m < Number(n); m++) assert.ok(zeroBits(SALT, String(m)) < 13);
});

test('the default bound is 30 s, and a difficulty-12 solve stops at its bound', async () => {
  assert.strictEqual(DEFAULT_MAX_SOLVE_TIME_MS, 30_000);
  const started = Date.now();
  await assert.rejects(solve(SALT, 12, { maxSolveTimeMs: 300 }), SolveTimeoutError);
  assert.ok(Date.now() - started < 10_000);
});

test('an AbortSignal stops the search with its reason', async () => {
  const ac = new AbortController();
  const p = solve(SALT, 12, { signal: ac.signal, maxSolveTimeMs: 0 });
  setTimeout(() => ac.abort(), 100);
  await assert.rejects(p, (e) => e.name === 'AbortError');
  await assert.rejects(solve(SALT, 1, { signal: AbortSignal.abort() }), (e) => e.name === 'AbortError');
});

test('what the protocol refuses is refused before any work', async () => {
  await assert.rejects(solve(SALT, 13), UnsolvableError);
  await assert.rejects(solve(SALT, 0), UnsolvableError);
  await assert.rejects(solve(SALT, 5, { maxDifficulty: 4 }), TooDifficultError);
  await assert.rejects(solve('', 1), UnsolvableError);
});
