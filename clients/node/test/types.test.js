'use strict';
// The hand-written index.d.ts type-checks a use of the whole API (tsc
// --strict, TypeScript's DOM types for fetch; skipped without tsc).
const test = require('node:test');
const assert = require('node:assert');
const { spawnSync } = require('node:child_process');
const path = require('node:path');

const tsc = spawnSync('tsc', ['--version']);

test('index.d.ts describes the API', { skip: tsc.status !== 0 && 'no tsc (apt-get install node-typescript)' }, () => {
  const r = spawnSync('tsc', ['--noEmit', '--strict', '--target', 'es2020', '--lib', 'es2020,dom',
    '--moduleResolution', 'node', path.join(__dirname, 'usage.ts')], { encoding: 'utf8' });
  assert.strictEqual(r.status, 0, r.stdout + r.stderr);
});
