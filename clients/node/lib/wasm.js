'use strict';
// The searches of nonce ranges, fastest first: the native addon where it
// is built (native.js: the CLI's rate), the WebAssembly one
// (wasm/src/lib.rs, built into lib/search.wasm by `make node-wasm`:
// SHA-256(salt + nonce) four nonces at a time in SIMD lanes, the salt's
// full blocks hashed once; five to seven times node:crypto's rate on one
// thread, bench.js), and node:crypto's (work.js) where neither runs.
// POW_SHIELD_SOLVER=wasm or js forces one.
const fs = require('node:fs');
const path = require('node:path');

const { nativeAddon } = require('./native');
const { isSolution, search: searchJs } = require('./work');

const WASM_PATH = path.join(__dirname, 'search.wasm');
/** Environment variable that forces a search: `POW_SHIELD_SOLVER=wasm` or `js`. */
const SOLVER_ENV = 'POW_SHIELD_SOLVER';

let compiled;

/** The compiled module (shared with the worker threads), or null where it cannot run. */
function wasmModule() {
  if (compiled === undefined) {
    compiled = null;
    if (process.env[SOLVER_ENV] !== 'js') {
      try {
        compiled = new WebAssembly.Module(fs.readFileSync(WASM_PATH));
      } catch {
        compiled = null; // no file, or no SIMD in this engine
      }
    }
  }
  return compiled;
}

/** Which search the solver runs: 'native', 'wasm' or 'js'. */
function engineName() {
  if (nativeAddon()) return 'native';
  return wasmModule() ? 'wasm' : 'js';
}

/** One instance of the module: its own memory, one salt and price at a time. */
class WasmSearch {
  constructor(module) {
    this.exports = new WebAssembly.Instance(module).exports;
    this.ready = false;
    this.owner = null;
  }

  /** Takes a salt and price; false when the module cannot search them. */
  prepare(salt, bits) {
    const x = this.exports;
    const bytes = Buffer.from(salt, 'utf8');
    this.ready = false;
    if (bytes.length > x.salt_capacity()) return false;
    new Uint8Array(x.memory.buffer, x.salt_buffer(), bytes.length).set(bytes);
    this.ready = x.prepare(bytes.length, bits) > 0;
    return this.ready;
  }

  /** The smallest candidate in from..to: a number, -1 for none, -2 for nonces too long for it. */
  search(from, to) {
    return this.exports.search(from, to);
  }
}

const instances = new WeakMap();

function instanceOf(module) {
  let w = instances.get(module);
  if (!w) {
    w = new WasmSearch(module);
    instances.set(module, w);
  }
  return w;
}

/**
 * A search of salt and price that runs nonce ranges: the native one where
 * it is built (`native`, default: nativeAddon()), else the WebAssembly one
 * (`module`: the compiled module, default wasmModule()), else node:crypto's;
 * null for either skips it. `run(from, to)` gives the smallest nonce of the
 * range meeting the bits (its digits) or null; every candidate of a fast
 * search is confirmed with node:crypto first.
 */
class RangeSearch {
  constructor(salt, bits, module = wasmModule(), native = nativeAddon()) {
    this.salt = salt;
    this.bits = bits;
    this.native = native;
    this.wasm = module ? instanceOf(module) : null;
  }

  run(from, to) {
    let at = from;
    while (this.native && at < to) {
      const r = this.native.search(this.salt, this.bits, at, to);
      if (r === -1) return null;
      if (r < 0) break; // arguments it does not take: the next search
      const nonce = String(r);
      if (isSolution(this.salt, nonce, this.bits)) return nonce;
      at = r + 1;
    }
    // One instance per thread and module: take it over for this salt.
    if (this.wasm && this.wasm.owner !== this) {
      this.wasm.owner = this;
      if (!this.wasm.prepare(this.salt, this.bits)) this.wasm = null;
    }
    while (this.wasm && at < to) {
      const r = this.wasm.search(at, to);
      if (r === -1) return null;
      if (r === -2) break; // nonces past one block: the plain search
      const nonce = String(r);
      if (isSolution(this.salt, nonce, this.bits)) return nonce;
      at = r + 1; // a fast path that disagrees with SHA-256 is never believed
    }
    return at < to ? searchJs(this.salt, this.bits, at, 1, to - at) : null;
  }
}

module.exports = { SOLVER_ENV, WASM_PATH, RangeSearch, WasmSearch, engineName, wasmModule };
