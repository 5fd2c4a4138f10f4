'use strict';
// The solver's threads, started on first use and kept: starting a worker
// costs more than a paid request's solve (tens of ms against a few). A job
// runs on its first `threads` workers, which share its chunks through a
// SharedArrayBuffer (a stop flag, the next chunk). Idle workers are unref'd,
// so they never keep a process alive; they are ref'd while a job runs, so
// that a pending solve does.
const path = require('node:path');
const { Worker } = require('node:worker_threads');

const { engineName, wasmModule } = require('./wasm');
const { EQUIX, equixModule } = require('./equix');

/** Nonces per chunk: about 10 ms of the WebAssembly search (2 of the native one), 50 of node:crypto's. */
const WASM_CHUNK = 1 << 16;
const JS_CHUNK = 1 << 14;
/** Equi-X nonces per chunk: each is milliseconds of work (tens in WebAssembly). */
const EQUIX_CHUNK = 1;

class Pool {
  constructor() {
    this.workers = [];
    this.jobs = new Map();
    this.nextJob = 0;
  }

  grow(n) {
    while (this.workers.length < n) {
      const w = new Worker(path.join(__dirname, 'worker.js'), { workerData: { module: wasmModule(), equix: equixModule() } });
      w.on('message', (m) => this.reported(m));
      w.on('error', (e) => this.failed(w, e));
      if (this.jobs.size === 0) w.unref();
      this.workers.push(w);
    }
  }

  /**
   * Starts a search on `threads` workers: { promise, stop }. The promise
   * resolves to the nonce's digits (null when stopped before one was found);
   * for `work` 'equix', to `nonce:solution`.
   */
  run(salt, bits, threads, work = 'sha256') {
    const n = Math.max(1, Math.floor(threads) || 1);
    this.grow(n);
    const job = this.nextJob++;
    const control = new SharedArrayBuffer(8);
    const ctl = new Int32Array(control);
    let chunk = engineName() === 'js' ? JS_CHUNK : WASM_CHUNK;
    if (work === EQUIX) chunk = EQUIX_CHUNK;
    let settle;
    const promise = new Promise((resolve, reject) => { settle = { resolve, reject }; });
    const workers = this.workers.slice(0, n);
    if (this.jobs.size === 0) for (const w of this.workers) w.ref();
    this.jobs.set(job, { ...settle, ctl, workers, left: n });
    for (const w of workers) w.postMessage({ job, salt, bits, chunk, control, work });
    return { promise, stop: () => this.finish(job, null, null) };
  }

  reported({ job, nonce }) {
    const j = this.jobs.get(job);
    if (!j) return;
    j.left -= 1;
    if (nonce !== null || j.left === 0) this.finish(job, null, nonce);
  }

  failed(worker, err) {
    this.workers = this.workers.filter((w) => w !== worker);
    for (const [job, j] of this.jobs) if (j.workers.includes(worker)) this.finish(job, err);
  }

  finish(job, err, nonce) {
    const j = this.jobs.get(job);
    if (!j) return;
    Atomics.store(j.ctl, 0, 1);
    this.jobs.delete(job);
    if (this.jobs.size === 0) for (const w of this.workers) w.unref();
    if (err) j.reject(err); else j.resolve(nonce);
  }
}

let shared = null;

/** The process's (or this thread's) pool. */
function pool() {
  if (!shared) shared = new Pool();
  return shared;
}

module.exports = { Pool, pool, WASM_CHUNK, JS_CHUNK };
