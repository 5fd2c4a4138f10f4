'use strict';
// What a response means to a paying client (docs/protocol.md §7, §8). The
// body is read only when a challenge status lacks the token header, and
// as JSON whatever its Content-Type (application/json or, when asked for,
// application/problem+json: the same problem details object).
const { BadChallengeError, BannedError, BlockedError } = require('./errors');
const { MAX_BITS } = require('./solver');

const HEADER_CHALLENGE = 'X-PoW-Challenge';
const HEADER_NONCE = 'X-PoW-Nonce';
/** An Equi-X solution, beside the nonce (`pow_shield_work equix`). */
const HEADER_SOLUTION = 'X-PoW-Solution';
/** The proofs of work this client knows: the token's `alg` (absent: SHA-256). */
const ALGORITHMS = new Set(['sha256', 'equix']);
const HEADER_DIFFICULTY = 'X-PoW-Difficulty';
const HEADER_BITS = 'X-PoW-Bits';
const HEADER_SHIELD = 'X-PoW-Shield';
const HEADER_NEXT_CHALLENGE = 'X-PoW-Next-Challenge';
const HEADER_NEXT_BITS = 'X-PoW-Next-Bits';
const HEADER_NEXT_DIFFICULTY = 'X-PoW-Next-Difficulty';
/** Statuses that come with a challenge: 429, and the fresh one of a spent, expired or wrong solution. */
const CHALLENGE_STATUSES = new Set([429, 409, 410, 422]);
/** A longer body is no challenge of the shield's: not parsed, handed back whole. */
const MAX_CHALLENGE_BODY = 64 * 1024;

const TOKEN = /^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$/;

/** Throws BlockedError / BannedError for the circuit breaker's answer. */
function checkBlocked(response) {
  const shield = (response.headers.get(HEADER_SHIELD) || '').trim();
  if (shield === 'banned') {
    throw new BannedError(`banned by the server (HTTP ${response.status}, X-PoW-Shield: banned)`, response);
  }
  if (shield === 'blocked') {
    throw new BlockedError(
      `blocked by the server's circuit breaker (HTTP ${response.status}, X-PoW-Shield: blocked): too many requests, try again later`,
      response);
  }
}

/** `Retry-After` in milliseconds: delay-seconds or an HTTP date; null without one. */
function retryAfterMs(headers, now = Date.now()) {
  const v = (headers.get('Retry-After') || '').trim();
  if (/^[0-9]+$/.test(v)) return Number(v) * 1000;
  if (!v || !/[A-Za-z]/.test(v)) return null;
  const when = Date.parse(v);
  return Number.isNaN(when) ? null : Math.max(0, when - now);
}

function intOrNull(v) {
  return Number.isInteger(v) && v >= 0 ? v : null;
}

/** The token's payload (base64url JSON), unverified: a client cannot check the MAC. */
function readPayload(token) {
  try {
    const json = JSON.parse(Buffer.from(token.split('.')[0], 'base64url').toString('utf8'));
    return json && typeof json === 'object' && !Array.isArray(json) ? json : null;
  } catch {
    return null;
  }
}

/** Reads the body up to MAX_CHALLENGE_BODY bytes: its JSON, or null. */
async function readBody(response) {
  if (!response.body) return null;
  const reader = response.clone().body.getReader();
  const parts = [];
  let size = 0;
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      size += value.length;
      if (size > MAX_CHALLENGE_BODY) return null;
      parts.push(value);
    }
  } finally {
    reader.cancel().catch(() => {});
  }
  try {
    return JSON.parse(Buffer.concat(parts).toString('utf8'));
  } catch {
    return null;
  }
}

/**
 * The bits a token asks: its `bits` (a difficulty in bits), else 4 × its
 * hex `difficulty`; a header asking more (bits, else hex digits) is
 * followed. null for a price outside the protocol.
 */
function priceOf(payload, bitsHeader, digitsHeader) {
  const difficulty = intOrNull(payload.difficulty);
  if (difficulty === null) return null;
  const headerBits = intOrNull(Number(bitsHeader ?? NaN));
  const headerDigits = intOrNull(Number(digitsHeader ?? NaN));
  let bits = Math.max(intOrNull(payload.bits) ?? 4 * difficulty, headerBits ?? 0);
  if (headerBits === null && headerDigits !== null && headerDigits > Math.ceil(bits / 4)) {
    bits = 4 * headerDigits;
  }
  return bits >= 1 && bits <= MAX_BITS ? bits : null;
}

/**
 * The next challenge a response carries for paying ahead (X-PoW-Next-*,
 * docs/protocol.md §6): { token, salt, bits, difficulty, exp, ts } (exp
 * and ts in the server's epoch ms, null without one), or null without one or for one that cannot
 * be read (paying ahead is optional: the 429 path remains).
 */
function readNextChallenge(response) {
  const header = response.headers.get(HEADER_NEXT_CHALLENGE);
  if (header === null) return null;
  const token = header.trim();
  if (!TOKEN.test(token)) return null;
  const payload = readPayload(token);
  if (!payload || typeof payload.salt !== 'string' || !payload.salt) return null;
  const bits = priceOf(payload,
    response.headers.get(HEADER_NEXT_BITS), response.headers.get(HEADER_NEXT_DIFFICULTY));
  if (bits === null) return null;
  const exp = Number.isSafeInteger(payload.exp) ? payload.exp : null;
  const ts = Number.isSafeInteger(payload.ts) ? payload.ts : null;
  const algorithm = payload.alg ?? 'sha256';
  if (!ALGORITHMS.has(algorithm)) return null;
  return { token, salt: payload.salt, bits, difficulty: Math.ceil(bits / 4), exp, ts, algorithm };
}

/** The `type` of the shield's own problems starts so (docs/protocol.md §7). */
const REFUSAL_TYPE = 'tag:pow-shield,';
/** The `error` texts of its 400 and 403 refusals of a solution (§7.2). */
const REFUSAL_ERRORS = new Set([
  'Malformed challenge token',
  'Invalid challenge signature',
  'Invalid payload encoding',
  'Challenge was not issued for this IP',
  'Challenge was not issued for this client',
]);

/**
 * Whether a 400 or 403 is the shield refusing a solution without a fresh
 * challenge (its problem `type` or `error` text in the JSON body, read
 * from a clone), not the application's own 400 or 403.
 */
async function isRefusal(response) {
  if (response.status !== 400 && response.status !== 403) return false;
  if (response.headers.get(HEADER_NEXT_CHALLENGE) !== null) return false;
  const doc = await readBody(response);
  if (!doc || typeof doc !== 'object') return false;
  if (typeof doc.type === 'string' && doc.type.startsWith(REFUSAL_TYPE)) return true;
  return typeof doc.error === 'string' && REFUSAL_ERRORS.has(doc.error);
}

/**
 * The challenge of a response, or null for one that is not the shield's:
 * { status, token, salt, bits, difficulty, retryAfterMs }. `bits` is what
 * the solution must meet: the token's `bits` when it has one (a difficulty
 * in bits), else 4 × its hex `difficulty`; a server asking for more in its
 * `X-PoW-Bits` / `X-PoW-Difficulty` headers (a location's minimum) is
 * followed. Throws BadChallengeError for a challenge that cannot be read
 * or sent back, before any work.
 */
async function readChallenge(response) {
  const { status, headers } = response;
  if (!CHALLENGE_STATUSES.has(status)) return null;
  let token = headers.get(HEADER_CHALLENGE);
  let body = null;
  if (token === null) {
    body = await readBody(response);
    if (!body || typeof body.challenge !== 'string') return null;
    token = body.challenge;
  }
  token = token.trim();
  if (!TOKEN.test(token)) {
    throw new BadChallengeError(`HTTP ${status}: a ${HEADER_CHALLENGE} token that can't be sent back`, response);
  }
  const payload = readPayload(token) || body;
  const salt = payload && payload.salt;
  if (typeof salt !== 'string' || !salt || intOrNull(payload.difficulty) === null) {
    throw new BadChallengeError(`HTTP ${status}: the ${HEADER_CHALLENGE} token has no readable payload`, response);
  }
  const bits = priceOf(payload, headers.get(HEADER_BITS), headers.get(HEADER_DIFFICULTY));
  if (bits === null) {
    throw new BadChallengeError(`HTTP ${status}: a difficulty outside the protocol (1..${MAX_BITS} bits)`, response);
  }
  // The token's `alg` (what the server verifies), else the body's `algorithm`.
  const algorithm = (readPayload(token) || {}).alg ?? (body && body.algorithm) ?? 'sha256';
  if (!ALGORITHMS.has(algorithm)) {
    throw new BadChallengeError(`HTTP ${status}: an unknown proof-of-work algorithm ${JSON.stringify(algorithm)}`, response);
  }
  return {
    status,
    token,
    salt,
    bits,
    difficulty: Math.ceil(bits / 4),
    algorithm,
    retryAfterMs: retryAfterMs(headers),
  };
}

module.exports = {
  HEADER_CHALLENGE,
  HEADER_NONCE,
  HEADER_SOLUTION,
  HEADER_DIFFICULTY,
  HEADER_BITS,
  HEADER_SHIELD,
  HEADER_NEXT_CHALLENGE,
  HEADER_NEXT_BITS,
  HEADER_NEXT_DIFFICULTY,
  CHALLENGE_STATUSES,
  MAX_CHALLENGE_BODY,
  checkBlocked,
  isRefusal,
  readChallenge,
  readNextChallenge,
  retryAfterMs,
};
