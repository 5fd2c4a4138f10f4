// ES module entry: the same objects as require('pow-shield') (Node reads
// the names from lib/index.js's module.exports).
export * from './lib/index.js';
export { default } from './lib/index.js';
