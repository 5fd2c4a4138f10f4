'use strict';
// Equi-X challenges (`pow_shield_work equix`, docs/protocol.md §5): a
// decimal nonce and an Equi-X solution of salt + nonce (16 bytes, sent
// base64url in X-PoW-Solution) whose SHA-256(salt + nonce + solution)
// starts with the bits asked. Two solvers, both Tor's equix crate
// (LGPL-3.0-only: README, "Equi-X"): the native addon's (HashX compiled
// where the CPU allows), else the WebAssembly one (wasm-equix/, built into
// lib/equix.wasm by `make node-wasm`; HashX interpreted). With neither,
// an Equi-X challenge is refused at once with an UnsolvableError naming
// the algorithm: nothing is searched.
const crypto = require('node:crypto');
const fs = require('node:fs');
const path = require('node:path');

const { nativeAddon } = require('./native');

const EQUIX = 'equix';
const EQUIX_WASM_PATH = path.join(__dirname, 'equix.wasm');
/** The environment variable of wasm.js: `wasm` forces the WebAssembly solver here too. */
const SOLVER_ENV = 'POW_SHIELD_SOLVER';

let compiled;

/** The compiled Equi-X module (shared with the worker threads), or null where it cannot run. */
function equixModule() {
  if (compiled === undefined) {
    compiled = null;
    if (process.env[SOLVER_ENV] !== 'js') {
      try {
        compiled = new WebAssembly.Module(fs.readFileSync(EQUIX_WASM_PATH));
      } catch {
        compiled = null; // not built, or an engine without WebAssembly
      }
    }
  }
  return compiled;
}

/** The native addon, when it has the Equi-X solver. */
function nativeEquix() {
  const addon = nativeAddon();
  return addon && typeof addon.equixSearch === 'function' ? addon : null;
}

/** Which Equi-X solver runs: 'native', 'wasm', or null for none. */
function equixEngine() {
  if (nativeEquix()) return 'native';
  return equixModule() ? 'wasm' : null;
}

/** Whether `hex(SHA-256(salt + nonce + solution))` has `bits` zero bits. */
function paysBits(salt, nonce, solution, bits) {
  const digest = crypto.createHash('sha256')
    .update(salt).update(nonce).update(Buffer.from(solution, 'base64url')).digest();
  let zeros = 0;
  for (const byte of digest) {
    if (byte !== 0) return zeros + Math.clz32(byte) - 24 >= bits;
    zeros += 8;
  }
  return true;
}

/**
 * A search of Equi-X solutions for one salt and price: `run(from, to)` is
 * the smallest nonce of the range with a paying solution, as
 * `{ nonce, solution }` (digits, base64url), or null. The hash of what
 * either solver finds is checked with node:crypto before it is handed out.
 */
class EquixSearch {
  constructor(salt, bits, module = equixModule(), native = nativeEquix()) {
    this.salt = salt;
    this.bits = bits;
    this.native = native;
    this.wasm = !native && module ? new WebAssembly.Instance(module).exports : null;
    if (this.wasm) {
      const bytes = Buffer.from(salt, 'utf8');
      if (bytes.length > this.wasm.salt_capacity()) this.wasm = null;
      else new Uint8Array(this.wasm.memory.buffer, this.wasm.salt_buffer(), bytes.length).set(bytes);
      this.length = bytes.length;
    }
  }

  run(from, to) {
    let found = null;
    if (this.native) {
      const text = this.native.equixSearch(this.salt, this.bits, from, to);
      if (text) {
        const [nonce, solution] = text.split(':');
        found = { nonce, solution };
      }
    } else if (this.wasm) {
      const r = this.wasm.search(this.length, this.bits, from, to);
      if (r >= 0) {
        const bytes = new Uint8Array(this.wasm.memory.buffer, this.wasm.solution_buffer(), 16);
        found = { nonce: String(r), solution: Buffer.from(bytes).toString('base64url') };
      }
    } else {
      throw new Error(`no ${EQUIX} solver here`);
    }
    return found && paysBits(this.salt, found.nonce, found.solution, this.bits) ? found : null;
  }
}

/** How Equi-X runs here: { engine, runtime, memory } (bytes a solving thread works in), or null without it. */
function equixInfo() {
  const native = nativeEquix();
  if (native) {
    const [runtime, memory] = native.equixInfo().split(' ');
    return { engine: 'native', runtime, memory: Number(memory) };
  }
  const module = equixModule();
  if (!module) return null;
  const x = new WebAssembly.Instance(module).exports;
  return { engine: 'wasm', runtime: 'interpreted', memory: x.memory_size() };
}

module.exports = { EQUIX, EQUIX_WASM_PATH, EquixSearch, equixEngine, equixInfo, equixModule, paysBits };
