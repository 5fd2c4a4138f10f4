'use strict';
// What a response means to a paying client (docs/protocol.md §7, §8). The
// body is read only when a challenge status lacks the token header, and
// as JSON whatever its Content-Type (application/json or, when asked for,
// application/problem+json: the same problem details object).
const { BadChallengeError, BannedError, BlockedError } = require('./errors');
const { MAX_BITS } = require('./solver');

const HEADER_CHALLENGE = 'X-PoW-Challenge';
const HEADER_NONCE = 'X-PoW-Nonce';
const HEADER_DIFFICULTY = 'X-PoW-Difficulty';
const HEADER_BITS = 'X-PoW-Bits';
const HEADER_SHIELD = 'X-PoW-Shield';
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
  const difficulty = payload && intOrNull(payload.difficulty);
  if (typeof salt !== 'string' || !salt || difficulty === null) {
    throw new BadChallengeError(`HTTP ${status}: the ${HEADER_CHALLENGE} token has no readable payload`, response);
  }
  const tokenBits = intOrNull(payload.bits) ?? 4 * difficulty;
  const headerBits = intOrNull(Number(headers.get(HEADER_BITS) ?? NaN));
  const headerDigits = intOrNull(Number(headers.get(HEADER_DIFFICULTY) ?? NaN));
  let bits = Math.max(tokenBits, headerBits ?? 0);
  if (headerBits === null && headerDigits !== null && headerDigits > Math.ceil(bits / 4)) {
    bits = 4 * headerDigits;
  }
  if (bits > MAX_BITS || bits < 1) {
    throw new BadChallengeError(`HTTP ${status}: difficulty ${Math.ceil(bits / 4)} (${bits} bits) is outside the protocol`, response);
  }
  return {
    status,
    token,
    salt,
    bits,
    difficulty: Math.ceil(bits / 4),
    retryAfterMs: retryAfterMs(headers),
  };
}

module.exports = {
  HEADER_CHALLENGE,
  HEADER_NONCE,
  HEADER_DIFFICULTY,
  HEADER_BITS,
  HEADER_SHIELD,
  CHALLENGE_STATUSES,
  MAX_CHALLENGE_BODY,
  checkBlocked,
  readChallenge,
  retryAfterMs,
};
