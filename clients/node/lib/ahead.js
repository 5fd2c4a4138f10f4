'use strict';
// Paying ahead (docs/protocol.md §6): a response after which the client
// has no free request left, and every response to a paid request, carries
// the next challenge (X-PoW-Next-Challenge). Its solve starts at once on
// the solver's threads while the caller reads the response; the next
// request to that origin takes the solution and sends it, so that a paid
// request costs one round trip and no 429. Each solution is sent once
// (the answer to it brings the next one); one past its exp is dropped
// unsent. Several requests in flight take one each, in order.
//
// A solution is kept per origin, and within it per directory of the path
// and the request's Authorization and Cookie: a token is bound to the
// location's price policy and to the client key (which the operator may
// take from a credential). The module treats one sent to another location
// or for another key as no payment and no offence (docs/protocol.md §6):
// the request is counted as if unpaid. Keying by path and credentials
// only saves that wasted solve and the round trip it would cost.
const { readNextChallenge } = require('./challenge');
const { originOf } = require('./gate');
const { solveChallenge } = require('./solver');

/** Where a solution may be sent again: origin, path directory, credentials. */
function scopeOf(url, headers) {
  let dir = '/';
  try {
    const p = new URL(String(url)).pathname;
    dir = p.slice(0, p.lastIndexOf('/') + 1);
  } catch {
    // not a URL: the origin alone
  }
  const h = headers || new Headers();
  return JSON.stringify([originOf(url), dir, h.get('authorization'), h.get('cookie')]);
}

/** Solutions kept per origin at most: about one per request in flight. */
const MAX_AHEAD = 16;
/** A solution this close to its exp is dropped unsent: it would arrive expired. */
const EXPIRY_MARGIN_MS = 2000;

/**
 * When a next challenge stops being worth sending, by this process's
 * monotonic clock (performance.now()): its arrival (now) plus exp - ts (both
 * the server's clock, so a client clock far off does not matter) less the
 * margin; null without exp. A token without ts falls back to the wall clock.
 */
function deadlineOf(next, now = performance.now()) {
  if (next.exp === null) return null;
  const life = next.ts !== null ? next.exp - next.ts : next.exp - Date.now();
  return now + life - EXPIRY_MARGIN_MS;
}

function expired(entry, now = performance.now()) {
  return entry.deadline !== null && now >= entry.deadline;
}

/** Resolves as `promise` does, or rejects with the signal's reason first. */
function untilAborted(promise, signal) {
  if (!signal) return promise;
  if (signal.aborted) return Promise.reject(signal.reason);
  return new Promise((resolve, reject) => {
    const onAbort = () => reject(signal.reason);
    signal.addEventListener('abort', onAbort, { once: true });
    promise.then((v) => {
      signal.removeEventListener('abort', onAbort);
      resolve(v);
    }, reject);
  });
}

/** The solutions ahead of one paying fetch (all powFetch calls share one). */
class Ahead {
  constructor() {
    this.origins = new Map();
    /** Next challenges seen and solves started (for tests and the curious). */
    this.offered = 0;
  }

  /** How many solutions are kept (solved or being solved) for a scope. */
  size(scope) {
    const list = this.origins.get(scope);
    return list ? list.length : 0;
  }

  /**
   * Starts solving the next challenge of `response` (to a request of
   * `scope`: scopeOf), if it carries one the options allow; whether it
   * did. `solveOptions` are solveBits's (threads, maxSolveTimeMs, maxDifficulty).
   */
  offer(scope, response, solveOptions) {
    const next = readNextChallenge(response);
    if (!next) return false;
    const entry = { token: next.token, deadline: deadlineOf(next) };
    if (expired(entry)) return false;
    const digits = next.difficulty;
    if (solveOptions.maxDifficulty != null && digits > solveOptions.maxDifficulty) return false;
    // A solve that fails (timeout, too hard) only means no solution ahead.
    entry.proof = solveChallenge(next, solveOptions).catch(() => null);
    if (!this.origins.has(scope)) this.origins.set(scope, []);
    const list = this.origins.get(scope);
    list.push(entry);
    if (list.length > MAX_AHEAD) list.shift();
    this.offered += 1;
    return true;
  }

  /**
   * The next solution for a scope, { token, nonce } (and an Equi-X
   * challenge's `solution`), or null for none:
   * waits for one still being solved (cheaper than a round trip). Each is
   * given out once; expired ones are dropped.
   */
  async take(scope, signal) {
    const list = this.origins.get(scope);
    while (list && list.length) {
      const entry = list.shift();
      if (expired(entry)) continue;
      const proof = await untilAborted(entry.proof, signal);
      if (proof !== null && !expired(entry)) return { token: entry.token, ...proof };
    }
    return null;
  }
}

module.exports = { Ahead, EXPIRY_MARGIN_MS, MAX_AHEAD, scopeOf };
