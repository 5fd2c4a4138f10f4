'use strict';
// One solver thread: nonces start, start + stride, ... until one gives
// SHA-256(salt + nonce) `bits` leading zero bits; posts it and ends. The
// main thread terminates it when another thread wins, on abort or timeout.
const { parentPort, workerData } = require('node:worker_threads');
const { search } = require('./work');

const { salt, bits, start, stride } = workerData;
parentPort.postMessage(search(salt, bits, start, stride, Infinity));
