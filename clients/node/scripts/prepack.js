#!/usr/bin/env node
'use strict';
// npm's prepack (npm pack, npm publish): the package carries the native
// addon for linux-x64 (glibc), prebuilds/linux-x64-gnu/pow_shield.node, which
// `make node-native` builds (`make node-pack` builds it and packs). Without
// it the packed client would solve at the WebAssembly search's rate, a
// quarter of the CLI's, and say nothing: so packing stops here instead,
// unless POW_SHIELD_PACK_WITHOUT_NATIVE=1 asks for a WebAssembly-only package.
const fs = require('node:fs');
const path = require('node:path');
const { PREBUILDS, PACKED_TAG } = require('../lib/native');

const addon = path.join(PREBUILDS, PACKED_TAG, 'pow_shield.node');
if (!fs.existsSync(addon) && process.env.POW_SHIELD_PACK_WITHOUT_NATIVE !== '1') {
  const shown = path.relative(process.cwd(), addon);
  console.error(`pow-shield: ${shown} is not built: the package would solve at WebAssembly speed.
  make node-pack                                (builds the addon, then packs into objs/)
  POW_SHIELD_PACK_WITHOUT_NATIVE=1 npm pack     (a package without it, knowingly)`);
  process.exit(1);
}
