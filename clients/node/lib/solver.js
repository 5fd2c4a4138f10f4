'use strict';
// The solver: the fastest search there is (wasm.js: the native addon where
// built, the WebAssembly SIMD one, node:crypto's SHA-256 where neither
// runs) on a pool of worker threads, one per core, sharing
// chunks of nonces. Bounded (30 s unless told) and cancellable with an
// AbortSignal: the threads stop within a chunk, the promise at once.
const os = require('node:os');

const { pool } = require('./pool');
const { RangeSearch, engineName, wasmModule } = require('./wasm');
const { nativeAddon } = require('./native');
const { EQUIX, equixEngine } = require('./equix');
const { SolveTimeoutError, TooDifficultError, UnsolvableError } = require('./errors');

/** Give up on one challenge after this long (the CLI's --max-solve-time, Python's max_solve_time). */
const DEFAULT_MAX_SOLVE_TIME_MS = 30_000;
/** The protocol's hardest challenge: 12 hex zeros, 48 bits. */
const MAX_DIFFICULTY = 12;
const MAX_BITS = 4 * MAX_DIFFICULTY;
/** Up to this many bits (expected 2^bits hashes) the main thread solves alone: starting workers costs more. */
const INLINE_BITS = 12;

function cores() {
  return typeof os.availableParallelism === 'function' ? os.availableParallelism() : os.cpus().length;
}

function abortReason(signal) {
  if (signal.reason !== undefined) return signal.reason;
  const e = new Error('This operation was aborted');
  e.name = 'AbortError';
  return e;
}

/**
 * Finds a nonce for `salt` with `bits` leading zero bits.
 * options: threads (default: every core), maxSolveTimeMs (30 000; null or
 * 0: no limit), maxDifficulty (hex digits: refused above it before any
 * work), signal (AbortSignal), response (attached to the errors).
 * Resolves to the nonce's digits.
 */
function solveBits(salt, bits, options = {}) {
  const { threads = cores(), response } = options;
  const refused = refusal(salt, bits, options);
  if (refused) return Promise.reject(refused);
  if (bits <= INLINE_BITS) {
    // At most a few thousand hashes: done before a worker could be asked.
    const nonce = new RangeSearch(salt, bits).run(0, 64 * 2 ** bits);
    return nonce === null
      ? Promise.reject(new UnsolvableError(`no nonce found for ${bits} bits`, response))
      : Promise.resolve(nonce);
  }
  return settled(pool().run(salt, bits, threads), bits, options);
}

/** Why a solve is refused before any work (an error), or null. */
function refusal(salt, bits, { maxDifficulty, signal, response } = {}) {
  if (typeof salt !== 'string' || salt.length === 0) {
    return new UnsolvableError('a challenge needs a salt', response);
  }
  if (!Number.isInteger(bits) || bits < 1 || bits > MAX_BITS) {
    return new UnsolvableError(`${bits} leading zero bits is outside the protocol's 1..${MAX_BITS}`, response);
  }
  const digits = Math.ceil(bits / 4);
  if (maxDifficulty != null && digits > maxDifficulty) {
    return new TooDifficultError(
      `challenge difficulty ${digits} is above the limit of ${maxDifficulty} (maxDifficulty)`,
      response, { difficulty: digits, maxDifficulty });
  }
  if (signal && signal.aborted) return abortReason(signal);
  return null;
}

/** A pool job's result within the options' time and signal. */
function settled({ promise, stop }, bits, options) {
  const { maxSolveTimeMs = DEFAULT_MAX_SOLVE_TIME_MS, signal, response } = options;
  const digits = Math.ceil(bits / 4);
  return new Promise((resolve, reject) => {
    let timer;
    let done = false;
    const finish = (err, nonce) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      if (signal) signal.removeEventListener('abort', onAbort);
      stop();
      if (err) reject(err); else resolve(nonce);
    };
    const onAbort = () => finish(abortReason(signal));
    if (signal) signal.addEventListener('abort', onAbort, { once: true });
    if (maxSolveTimeMs) {
      const started = Date.now();
      timer = setTimeout(() => finish(new SolveTimeoutError(
        `no solution for difficulty ${digits} (${bits} bits) within ${((Date.now() - started) / 1000).toFixed(1)} s (maxSolveTimeMs)`,
        response)), maxSolveTimeMs);
    }
    promise.then(
      (nonce) => finish(nonce === null ? new UnsolvableError(`no nonce found for ${bits} bits`, response) : null, nonce),
      (err) => finish(err));
  });
}

/**
 * Pays an Equi-X challenge (docs/protocol.md §5): resolves to { nonce,
 * solution } (digits; the solution base64url, for X-PoW-Solution). Same
 * options as solveBits. Without an Equi-X solver (neither the native addon
 * nor lib/equix.wasm runs) it rejects at once with an UnsolvableError
 * naming the algorithm.
 */
function solveEquix(salt, bits, options = {}) {
  const { threads = cores(), response } = options;
  if (!equixEngine()) {
    return Promise.reject(new UnsolvableError(
      `the server asks for ${EQUIX} proof of work, which needs the native addon or lib/equix.wasm; neither runs here`,
      response));
  }
  const refused = refusal(salt, bits, options);
  if (refused) return Promise.reject(refused);
  return settled(pool().run(salt, bits, threads, EQUIX), bits, options).then((text) => {
    const [nonce, solution] = text.split(':');
    return { nonce, solution };
  });
}

/**
 * Pays a challenge as readChallenge gives it ({ salt, bits, algorithm }):
 * { nonce } for SHA-256, { nonce, solution } for Equi-X.
 */
async function solveChallenge(c, options = {}) {
  if (c.algorithm === EQUIX) return solveEquix(c.salt, c.bits, options);
  return { nonce: await solveBits(c.salt, c.bits, options) };
}

/**
 * Finds a nonce for a difficulty in hex zeros (docs/protocol.md §5), or
 * for `{ bits }` leading zero bits: `solve(salt, 4)`, `solve(salt, { bits: 18 })`.
 */
function solve(salt, difficulty, options = {}) {
  const bits = typeof difficulty === 'object' && difficulty !== null
    ? (difficulty.bits ?? 4 * difficulty.difficulty)
    : 4 * difficulty;
  return solveBits(salt, bits, options);
}

/**
 * Hashes per second of one search over about `ms` milliseconds, on this
 * thread (it blocks it): `engine` 'native', 'wasm' or 'js' (default: the
 * one the solver runs). Per CPU second and per second of wall time.
 */
function searchRate({ engine = engineName(), ms = 1000 } = {}) {
  const salt = 'ffffffffffffffffffffffffffffffff';
  const native = engine === 'native' ? nativeAddon() : null;
  const module = engine === 'wasm' ? wasmModule() : null;
  if (engine !== 'js' && !native && !module) throw new Error(`the ${engine} search cannot run here`);
  // 64 bits: never met, so every nonce of the range is hashed.
  const s = new RangeSearch(salt, 64, module, native);
  const chunk = engine === 'js' ? 1 << 12 : 1 << 16;
  s.run(1e6, 1e6 + 8 * chunk); // warm: the engine's optimizing tier
  const cpu = process.cpuUsage();
  const started = process.hrtime.bigint();
  let hashes = 0;
  let from = 1e6;
  while (Number(process.hrtime.bigint() - started) / 1e6 < ms) {
    s.run(from, from + chunk);
    from += chunk;
    hashes += chunk;
  }
  const wall = Number(process.hrtime.bigint() - started) / 1e9;
  const used = process.cpuUsage(cpu);
  return { engine, hashes, perCpuSecond: hashes / ((used.user + used.system) / 1e6), perSecond: hashes / wall };
}

/** Hashes per second on `threads` threads over about `ms` milliseconds. */
async function hashRate({ threads = cores(), ms = 2000 } = {}) {
  // Solves of 20 bits, timed: a search of n threads that stops at nonce k
  // has tried about k + 1 nonces.
  const salt = 'ffffffffffffffffffffffffffffffff';
  const started = process.hrtime.bigint();
  let hashes = 0;
  let i = 0;
  while (Number(process.hrtime.bigint() - started) / 1e6 < ms) {
    const s = `${salt.slice(0, 24)}${String(i++).padStart(8, '0')}`;
    const nonce = await solveBits(s, 20, { threads, maxSolveTimeMs: 0 });
    hashes += Number(nonce) + 1;
  }
  const seconds = Number(process.hrtime.bigint() - started) / 1e9;
  return hashes / seconds;
}

module.exports = {
  DEFAULT_MAX_SOLVE_TIME_MS,
  MAX_DIFFICULTY,
  MAX_BITS,
  cores,
  engineName,
  searchRate,
  solve,
  solveBits,
  solveChallenge,
  solveEquix,
  hashRate,
};
