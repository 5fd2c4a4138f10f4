#!/usr/bin/env node
'use strict';
// The Node solver's hash rate on one thread, per search: the native addon
// (where `make node-native` built it), the WebAssembly SIMD one
// (lib/search.wasm) and node:crypto's (the fallback), each for
// about SECONDS (default 2), on this thread. Per CPU second (as `openssl
// speed` and `pow-shield bench` count, so that a shared machine moves it
// less) and per second of wall time.
//
//   node bench.js [SECONDS] [--json]        (npm run bench; bench/solvers.sh)
const { searchRate, engineName } = require('./lib/solver');
const { wasmModule } = require('./lib/wasm');
const { nativeAddon } = require('./lib/native');

const args = process.argv.slice(2);
const json = args.includes('--json');
const seconds = Number(args.find((a) => /^[0-9.]+$/.test(a)) ?? 2);

const rates = {};
const available = { native: () => nativeAddon(), wasm: () => wasmModule(), js: () => true };
for (const engine of ['native', 'wasm', 'js']) {
  if (!available[engine]()) continue;
  rates[engine] = searchRate({ engine, ms: seconds * 1000 });
}

if (json) {
  console.log(JSON.stringify({ engine: engineName(), rates }));
} else {
  console.log(`pow-shield Node solver, one thread, ${seconds} s per search (solver in use: ${engineName()})`);
  for (const [engine, r] of Object.entries(rates)) {
    console.log(`  ${engine.padEnd(5)} ${(r.perCpuSecond / 1e6).toFixed(2).padStart(7)} M hashes/s per CPU second`
      + ` (${(r.perSecond / 1e6).toFixed(2)} M/s wall clock)`);
  }
  for (const engine of ['native', 'wasm']) {
    if (rates[engine]) console.log(`  ${engine} ÷ js: ${(rates[engine].perCpuSecond / rates.js.perCpuSecond).toFixed(1)}`);
  }
  if (!rates.native) console.log('  native: not built (make node-native), or POW_SHIELD_SOLVER=wasm|js');
  if (!rates.wasm) console.log('  wasm: not available (no WebAssembly SIMD), or POW_SHIELD_SOLVER=js');
}
