'use strict';
// The hash rule (docs/protocol.md §5): SHA-256 of the salt text followed by
// the nonce's decimal digits, with `bits` leading zero bits (a difficulty
// of d hex zeros is 4 d bits). node:crypto's one-shot crypto.hash (Node
// 20.12+) is about three times createHash's rate; older Node uses the latter.
const crypto = require('node:crypto');

const hexDigest = typeof crypto.hash === 'function'
  ? (text) => crypto.hash('sha256', text, 'hex')
  : (text) => crypto.createHash('sha256').update(text).digest('hex');

/** A test of a lower-case hex digest for `bits` leading zero bits. */
function zeroBitsTest(bits) {
  const whole = bits >> 2;
  const zeros = '0'.repeat(whole);
  const rest = bits & 3;
  // The next nibble must be below 2^(4 - rest): '0'..'7' for 1 bit, ...
  const below = rest === 0 ? null : '0123456789abcdef'[1 << (4 - rest)];
  return below === null
    ? (hex) => hex.startsWith(zeros)
    : (hex) => hex.startsWith(zeros) && hex[whole] < below;
}

/** Whether `nonce` (digits) solves `salt` for `bits`. */
function isSolution(salt, nonce, bits) {
  return /^[0-9]{1,20}$/.test(nonce) && zeroBitsTest(bits)(hexDigest(salt + nonce));
}

/**
 * Tries `count` nonces start, start + stride, ...: the first solution as a
 * string, or null.
 */
function search(salt, bits, start, stride, count) {
  const meets = zeroBitsTest(bits);
  let nonce = start;
  for (let i = 0; i < count; i++, nonce += stride) {
    if (meets(hexDigest(salt + nonce))) return String(nonce);
  }
  return null;
}

module.exports = { isSolution, search };
