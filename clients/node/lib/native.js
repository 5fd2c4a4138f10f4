'use strict';
// The native search (native/, a Node-API addon of the protocol crate's
// search: SHA-NI where the CPU has it), built by `make node-native` into
// native/pow_shield.node. Optional, as the Python client's native solver:
// not in the npm package (a build is for one platform); where it is not
// built, or with POW_SHIELD_SOLVER=wasm or js, the other searches run.
const path = require('node:path');

const NATIVE_PATH = path.join(__dirname, '..', 'native', 'pow_shield.node');

let loaded;

/** The addon's exports ({ search, engine }), or null where it is not built or cannot load. */
function nativeAddon() {
  if (loaded === undefined) {
    loaded = null;
    const forced = process.env.POW_SHIELD_SOLVER;
    if (forced !== 'wasm' && forced !== 'js') {
      try {
        const m = { exports: {} };
        process.dlopen(m, NATIVE_PATH);
        if (typeof m.exports.search === 'function') loaded = m.exports;
      } catch {
        loaded = null; // not built, or built for another platform
      }
    }
  }
  return loaded;
}

module.exports = { NATIVE_PATH, nativeAddon };
