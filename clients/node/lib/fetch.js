'use strict';
// `withPowShield(fetch)`: a fetch that pays pow-shield's challenges and sends
// the request again; `powFetch` is it around the global fetch.
const { readChallenge, checkBlocked, retryAfterMs, HEADER_CHALLENGE, HEADER_NONCE } = require('./challenge');
const { PowShieldError, RetriesExhaustedError } = require('./errors');
const { DEFAULT_MAX_SOLVE_TIME_MS, solveBits } = require('./solver');
const { DEFAULT_IN_FLIGHT, Gate } = require('./gate');

/** Paid or waited resends per request: the same number in every client. */
const DEFAULT_MAX_RETRIES = 5;
/** Longest Retry-After slept with preferWait (the CLI's --max-wait). */
const DEFAULT_MAX_WAIT_MS = 60_000;

const DEFAULTS = Object.freeze({
  maxDifficulty: undefined,
  maxSolveTimeMs: DEFAULT_MAX_SOLVE_TIME_MS,
  preferWait: false,
  maxWaitMs: DEFAULT_MAX_WAIT_MS,
  maxRetries: DEFAULT_MAX_RETRIES,
  threads: undefined,
  inFlight: DEFAULT_IN_FLIGHT,
});

const REDIRECTS = new Set([301, 302, 303, 307, 308]);
/** fetch's own limit on redirects followed. */
const MAX_REDIRECTS = 20;

function sleep(ms, signal) {
  return new Promise((resolve, reject) => {
    if (signal && signal.aborted) return reject(signal.reason);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal.reason);
    };
    const timer = setTimeout(() => {
      if (signal) signal.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    if (signal) signal.addEventListener('abort', onAbort, { once: true });
  });
}

/** A body that can be sent a second time (a stream cannot). */
function replayable(body) {
  return body == null || typeof body === 'string' || body instanceof ArrayBuffer
    || ArrayBuffer.isView(body) || body instanceof URLSearchParams
    || (typeof Blob !== 'undefined' && body instanceof Blob)
    || (typeof FormData !== 'undefined' && body instanceof FormData);
}

function discard(response) {
  if (response.body && !response.bodyUsed) response.body.cancel().catch(() => {});
}

/**
 * One send of a request that carries a solution. The solution buys this
 * URL one request only: redirects are followed here (as fetch's 'follow'
 * would) without the X-PoW-* headers, so that they never reach another
 * origin (nor are they spent twice at this one).
 */
async function sendPaid(fetchImpl, input, init, headers, base) {
  const mode = init.redirect ?? (base ? base.redirect : undefined) ?? 'follow';
  if (mode !== 'follow') return fetchImpl(base ? base.clone() : input, { ...init, headers });
  let url = base ? base.url : String(input instanceof URL ? input.href : input);
  let method = (init.method ?? (base ? base.method : 'GET')).toUpperCase();
  let { body } = init;
  let response = await fetchImpl(base ? base.clone() : input, { ...init, headers, redirect: 'manual' });
  const next = new Headers(headers);
  next.delete(HEADER_CHALLENGE);
  next.delete(HEADER_NONCE);
  for (let hops = 0; REDIRECTS.has(response.status) && response.headers.get('location'); hops += 1) {
    if (hops >= MAX_REDIRECTS) throw new TypeError(`more than ${MAX_REDIRECTS} redirects`);
    url = new URL(response.headers.get('location'), url).href;
    discard(response);
    if ((response.status === 303 && method !== 'HEAD') || ([301, 302].includes(response.status) && method === 'POST')) {
      method = 'GET';
      body = undefined;
      next.delete('content-type');
    }
    response = await fetchImpl(url, { ...init, method, body, headers: next, redirect: 'manual' });
  }
  return response;
}

/**
 * Wraps a fetch-compatible function (the global fetch, undici's, one
 * handed to ky or axios) so that it pays pow-shield's challenges.
 * options: maxDifficulty (hex digits), maxSolveTimeMs (30 000; 0 or null:
 * no limit), preferWait (true, or the longest Retry-After in ms worth
 * waiting instead of paying), maxWaitMs (60 000), maxRetries (5), threads,
 * inFlight (4: requests in flight per origin, n - 1 for the server's n
 * strikes, until its Remaining shows room; every call of the returned
 * fetch shares that gate).
 */
function withPowShield(fetchImpl, options = {}, gate = undefined) {
  if (typeof fetchImpl !== 'function') throw new TypeError('withPowShield needs a fetch function');
  const policy = { ...DEFAULTS, ...options };
  const inFlight = gate ?? new Gate(policy.inFlight);
  if (!(policy.maxRetries >= 0)) throw new RangeError('maxRetries must be >= 0');
  if (!(policy.maxWaitMs >= 0)) throw new RangeError('maxWaitMs must be >= 0');

  const wantsWait = (delay) => {
    if (delay === null || policy.preferWait === false || delay > policy.maxWaitMs) return false;
    return policy.preferWait === true || delay <= policy.preferWait;
  };

  async function powShieldFetch(input, init = {}) {
    const isRequest = typeof Request !== 'undefined' && input instanceof Request;
    const signal = init.signal ?? (isRequest ? input.signal : undefined);
    const base = isRequest ? input : null;
    const given = new Headers(init.headers ?? (isRequest ? input.headers : undefined));
    // Held through every send, solve and wait of this request.
    const pass = await inFlight.enter(base ? base.url : input, signal);
    try {
      return await payThrough(input, init, base, given, signal, pass);
    } finally {
      pass.release();
    }
  }

  async function payThrough(input, init, base, given, signal, pass) {
    let solution = null;
    let retries = 0;
    for (;;) {
      const headers = new Headers(given);
      if (solution) {
        headers.set(HEADER_CHALLENGE, solution.token);
        headers.set(HEADER_NONCE, solution.nonce);
      }
      if (retries > 0) pass.resending();
      const response = solution
        ? await sendPaid(fetchImpl, input, init, headers, base)
        : await fetchImpl(base ? base.clone() : input, { ...init, headers });
      pass.saw(response);
      checkBlocked(response);
      let move = null;
      const delay = retryAfterMs(response.headers);
      if (response.status === 503) {
        if (wantsWait(delay)) move = { wait: delay };
      } else {
        const challenge = await readChallenge(response);
        if (challenge) {
          const last = retries + 1 >= policy.maxRetries;
          move = challenge.status === 429 && !last && wantsWait(challenge.retryAfterMs)
            ? { wait: challenge.retryAfterMs }
            : { pay: challenge };
        }
      }
      if (move === null) return response;
      if (retries >= policy.maxRetries) {
        discard(response);
        throw new RetriesExhaustedError(
          `still HTTP ${response.status} after ${retries} retr${retries === 1 ? 'y' : 'ies'}`, response);
      }
      if (!replayable(init.body)) {
        discard(response);
        throw new PowShieldError(
          `HTTP ${response.status} asks to send the request again, but its body is a stream that cannot be sent twice`,
          response);
      }
      retries += 1;
      if (move.wait !== undefined) {
        discard(response);
        await sleep(move.wait, signal);
        solution = null;
      } else {
        const c = move.pay;
        try {
          const nonce = await solveBits(c.salt, c.bits, {
            threads: policy.threads,
            maxSolveTimeMs: policy.maxSolveTimeMs,
            maxDifficulty: policy.maxDifficulty,
            signal,
            response,
          });
          solution = { token: c.token, nonce };
        } finally {
          discard(response);
        }
      }
    }
  }

  return powShieldFetch;
}

/** powFetch's gates, one per inFlight: all its calls share them. */
const sharedGates = new Map();

/** The global fetch, paying its way: `powFetch(url, init)`; options as withPowShield's, in `init.powShield`. */
function powFetch(input, init = {}) {
  const { powShield, ...rest } = init;
  const floor = (powShield && powShield.inFlight) ?? DEFAULT_IN_FLIGHT;
  if (!sharedGates.has(floor)) sharedGates.set(floor, new Gate(floor));
  return withPowShield(globalThis.fetch, powShield, sharedGates.get(floor))(input, rest);
}

module.exports = { DEFAULT_MAX_RETRIES, DEFAULT_MAX_WAIT_MS, withPowShield, powFetch };
