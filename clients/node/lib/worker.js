'use strict';
// One solver thread of the pool (pool.js). A job's nonces are cut into
// chunks; each thread takes the next chunk from a shared counter until one
// finds a nonce or the job's stop flag is set (another thread won, the
// caller aborted or timed out), and posts { job, nonce } (null when it
// stopped). The search is lib/wasm.js's: WebAssembly where it runs; for
// an Equi-X job (`work` 'equix'), lib/equix.js's, whose nonce is posted as
// `nonce:solution`.
const { parentPort, workerData } = require('node:worker_threads');
const { RangeSearch } = require('./wasm');
const { EQUIX, EquixSearch } = require('./equix');

const { module: compiled, equix: equixCompiled } = workerData;

function searchOf(salt, bits, work) {
  if (work !== EQUIX) return new RangeSearch(salt, bits, compiled);
  const search = new EquixSearch(salt, bits, equixCompiled);
  return {
    run(from, to) {
      const found = search.run(from, to);
      return found && `${found.nonce}:${found.solution}`;
    },
  };
}

parentPort.on('message', ({ job, salt, bits, chunk, control, work }) => {
  const ctl = new Int32Array(control);
  const search = searchOf(salt, bits, work);
  let nonce = null;
  while (nonce === null && Atomics.load(ctl, 0) === 0) {
    const from = Atomics.add(ctl, 1, 1) * chunk;
    nonce = search.run(from, from + chunk);
  }
  if (nonce !== null) Atomics.store(ctl, 0, 1);
  parentPort.postMessage({ job, nonce });
});
