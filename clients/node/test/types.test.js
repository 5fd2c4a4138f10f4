'use strict';
// The hand-written index.d.ts type-checks a use of the whole API (tsc
// --strict, TypeScript's DOM types for fetch; skipped without tsc), and
// withPowShieldAxios's against axios's own types (where axios is installed).
const test = require('node:test');
const assert = require('node:assert');
const { spawnSync } = require('node:child_process');
const path = require('node:path');

const tsc = spawnSync('tsc', ['--version']);
const noTsc = tsc.status !== 0 && 'no tsc (apt-get install node-typescript)';

function compile(file) {
  return spawnSync('tsc', ['--noEmit', '--strict', '--target', 'es2020', '--lib', 'es2020,dom',
    '--moduleResolution', 'node', '--esModuleInterop', path.join(__dirname, file)], { encoding: 'utf8' });
}

test('index.d.ts describes the API', { skip: noTsc }, () => {
  const r = compile('usage.ts');
  assert.strictEqual(r.status, 0, r.stdout + r.stderr);
});

let axios = true;
try {
  require.resolve('axios');
} catch {
  axios = false;
}

test('withPowShieldAxios takes and gives back an AxiosInstance (axios\'s own types)', {
  skip: noTsc || (!axios && 'axios is not installed (make node-dev)'),
}, () => {
  const r = compile('usage-axios.ts');
  assert.strictEqual(r.status, 0, r.stdout + r.stderr);
});
