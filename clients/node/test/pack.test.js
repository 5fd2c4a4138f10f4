'use strict';
// `npm pack` makes a tarball that holds what the package needs (lib/ with
// the WebAssembly search, the native addon for linux-x64 glibc, the entry
// points, the types, bench.js, the README) and nothing of its tests, its
// scripts or the searches' Rust source; without the addon it refuses to
// pack unless told. Offline: the package has no dependencies. Skipped
// without npm.
const test = require('node:test');
const assert = require('node:assert');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { spawnSync } = require('node:child_process');

const { PREBUILDS, PACKED_TAG } = require('../lib/native');

const npm = spawnSync('npm', ['--version'], { encoding: 'utf8' });
const noNpm = npm.status !== 0 && 'no npm';
const here = path.join(__dirname, '..');
const { name, version } = JSON.parse(fs.readFileSync(path.join(here, 'package.json'), 'utf8'));
const built = fs.existsSync(path.join(PREBUILDS, PACKED_TAG, 'pow_shield.node'));

/** npm pack of `dir` into a temporary directory: { status, output, files (null when it failed) }. */
function pack(dir, env = {}) {
  const dest = fs.mkdtempSync(path.join(os.tmpdir(), 'pow-shield-pack-'));
  try {
    // --foreground-scripts: npm 9 (Debian 12's) hides a script's output under --silent
    const r = spawnSync('npm', ['pack', '--pack-destination', dest, '--offline', '--silent', '--foreground-scripts'], {
      cwd: dir, encoding: 'utf8', env: { ...process.env, npm_config_cache: path.join(dest, 'cache'), ...env },
    });
    if (r.status !== 0) return { status: r.status, output: r.stdout + r.stderr, files: null };
    const t = spawnSync('tar', ['-tzf', path.join(dest, `${name}-${version}.tgz`)], { encoding: 'utf8' });
    assert.strictEqual(t.status, 0, t.stderr);
    return { status: 0, output: r.stdout + r.stderr, files: t.stdout.trim().split('\n').map((f) => f.replace(/^package\//, '')) };
  } finally {
    fs.rmSync(dest, { recursive: true, force: true });
  }
}

test('npm pack holds lib/, the wasm, the linux-x64 glibc addon, index.d.ts, bench.js and the README, nothing from test/', {
  skip: noNpm || (!built && `prebuilds/${PACKED_TAG}/pow_shield.node is not built (make node-native)`),
}, () => {
  const { files, output } = pack(here);
  assert.ok(files, output);
  for (const want of ['package.json', 'README.md', 'index.d.ts', 'index.mjs', 'bench.js',
    'lib/index.js', 'lib/fetch.js', 'lib/axios.js', 'lib/pay.js', 'lib/ahead.js', 'lib/pace.js', 'lib/worker.js',
    'lib/pool.js', 'lib/wasm.js', 'lib/native.js', 'lib/search.wasm', `prebuilds/${PACKED_TAG}/pow_shield.node`]) {
    assert.ok(files.includes(want), `${want} in ${files.join(' ')}`);
  }
  assert.deepStrictEqual(files.filter((f) => /^(test|wasm|native|scripts|node_modules)\//.test(f)), []);
  // Every file of lib/ is packed.
  for (const f of fs.readdirSync(path.join(here, 'lib'))) assert.ok(files.includes(`lib/${f}`), f);
});

test('npm pack without the linux-x64 addon stops and says how to build it, unless asked for a WebAssembly-only package', {
  skip: noNpm,
}, () => {
  // A copy of the package's sources without prebuilds/.
  const copy = fs.mkdtempSync(path.join(os.tmpdir(), 'pow-shield-src-'));
  try {
    for (const f of ['package.json', 'README.md', 'index.d.ts', 'index.mjs', 'bench.js', 'lib', 'scripts']) {
      fs.cpSync(path.join(here, f), path.join(copy, f), { recursive: true });
    }
    const refused = pack(copy);
    assert.notStrictEqual(refused.status, 0);
    assert.match(refused.output, /make node-pack/);
    const { files, output } = pack(copy, { POW_SHIELD_PACK_WITHOUT_NATIVE: '1' });
    assert.ok(files, output);
    assert.ok(files.includes('lib/search.wasm'));
    assert.deepStrictEqual(files.filter((f) => f.startsWith('prebuilds/')), []);
  } finally {
    fs.rmSync(copy, { recursive: true, force: true });
  }
});
