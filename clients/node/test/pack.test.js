'use strict';
// `npm pack` makes a tarball that holds what the package needs (lib/ with
// the WebAssembly search, the entry points, the types, bench.js, the
// README) and nothing of its tests or the search's Rust source. Offline:
// the package has no dependencies. Skipped without npm.
const test = require('node:test');
const assert = require('node:assert');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { spawnSync } = require('node:child_process');

const npm = spawnSync('npm', ['--version'], { encoding: 'utf8' });
const skip = npm.status !== 0 && 'no npm';
const here = path.join(__dirname, '..');

test('npm pack holds lib/, the wasm, index.d.ts, bench.js and the README, nothing from test/', { skip }, () => {
  const dest = fs.mkdtempSync(path.join(os.tmpdir(), 'pow-shield-pack-'));
  try {
    const r = spawnSync('npm', ['pack', '--pack-destination', dest, '--offline', '--silent'], {
      cwd: here, encoding: 'utf8', env: { ...process.env, npm_config_cache: path.join(dest, 'cache') },
    });
    assert.strictEqual(r.status, 0, r.stdout + r.stderr);
    const { name, version } = JSON.parse(fs.readFileSync(path.join(here, 'package.json'), 'utf8'));
    const tarball = path.join(dest, `${name}-${version}.tgz`);
    const t = spawnSync('tar', ['-tzf', tarball], { encoding: 'utf8' });
    assert.strictEqual(t.status, 0, t.stderr);
    const files = t.stdout.trim().split('\n').map((f) => f.replace(/^package\//, ''));
    for (const want of ['package.json', 'README.md', 'index.d.ts', 'index.mjs', 'bench.js',
      'lib/index.js', 'lib/fetch.js', 'lib/ahead.js', 'lib/pace.js', 'lib/worker.js', 'lib/pool.js',
      'lib/wasm.js', 'lib/search.wasm']) {
      assert.ok(files.includes(want), `${want} in ${files.join(' ')}`);
    }
    assert.deepStrictEqual(files.filter((f) => /^(test|wasm|native)\//.test(f)), []);
    // Every file of lib/ is packed.
    for (const f of fs.readdirSync(path.join(here, 'lib'))) assert.ok(files.includes(`lib/${f}`), f);
  } finally {
    fs.rmSync(dest, { recursive: true, force: true });
  }
});
