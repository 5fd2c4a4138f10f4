'use strict';
// The native search (native/, a Node-API addon of the protocol crate's
// search: SHA-NI where the CPU has it), built by `make node-native` into
// prebuilds/<platform tag>/pow_shield.node: linux-x64-gnu on the machines
// the package is made on, which is what the npm package carries (`make
// node-pack`). It is loaded only where the platform, the architecture and
// the C library are the ones it was built for; elsewhere, where it cannot
// load, or with POW_SHIELD_SOLVER=wasm or js, the other searches run.
const fs = require('node:fs');
const path = require('node:path');

const PREBUILDS = path.join(__dirname, '..', 'prebuilds');
/** The platform the npm package carries an addon for. */
const PACKED_TAG = 'linux-x64-gnu';

let libc;

/**
 * Linux's C library: 'gnu' (glibc) or 'musl'; null elsewhere. ldd says
 * which in its text (a glibc or a musl script); failing that, Node's
 * diagnostic report names the glibc it runs on.
 */
function libcOf() {
  if (process.platform !== 'linux') return null;
  if (libc === undefined) {
    libc = null;
    try {
      const ldd = fs.readFileSync('/usr/bin/ldd', 'latin1');
      if (ldd.includes('musl')) libc = 'musl';
      else if (ldd.includes('GNU C Library') || ldd.includes('GLIBC')) libc = 'gnu';
    } catch {
      // no ldd (a minimal image): the report below
    }
    if (libc === null) {
      try {
        const { header } = process.report.getReport();
        libc = header && header.glibcVersionRuntime ? 'gnu' : 'musl';
      } catch {
        libc = 'musl'; // unknown: not glibc's addon
      }
    }
  }
  return libc;
}

/** This process's platform tag: linux-x64-gnu, linux-x64-musl, linux-arm64-gnu, darwin-arm64, ... */
function platformTag(platform = process.platform, arch = process.arch, c = libcOf()) {
  return platform === 'linux' ? `${platform}-${arch}-${c}` : `${platform}-${arch}`;
}

/** Where the addon for this platform is (whether or not it is there). */
const NATIVE_PATH = path.join(PREBUILDS, platformTag(), 'pow_shield.node');

let loaded;

/** The addon's exports ({ search, engine }), or null where none is built for this platform or it cannot load. */
function nativeAddon() {
  if (loaded === undefined) {
    loaded = null;
    const forced = process.env.POW_SHIELD_SOLVER;
    if (forced !== 'wasm' && forced !== 'js' && fs.existsSync(NATIVE_PATH)) {
      try {
        const m = { exports: {} };
        process.dlopen(m, NATIVE_PATH);
        if (typeof m.exports.search === 'function') loaded = m.exports;
      } catch {
        loaded = null; // e.g. a glibc older than the one it needs: the WebAssembly search
      }
    }
  }
  return loaded;
}

module.exports = { NATIVE_PATH, PACKED_TAG, PREBUILDS, libcOf, nativeAddon, platformTag };
