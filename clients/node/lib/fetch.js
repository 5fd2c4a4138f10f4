'use strict';
// `withPowShield(fetch)`: a fetch that pays pow-shield's challenges and sends
// the request again; `powFetch` is it around the global fetch.
const { readChallenge, checkBlocked, isRefusal, retryAfterMs, HEADER_CHALLENGE, HEADER_NONCE } = require('./challenge');
const { PowShieldError, RetriesExhaustedError } = require('./errors');
const { DEFAULT_MAX_SOLVE_TIME_MS, solveBits } = require('./solver');
const { DEFAULT_IN_FLIGHT, Gate } = require('./gate');
const { Ahead, scopeOf } = require('./ahead');
const { Pacer, sleep } = require('./pace');

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
  payAhead: true,
  pace: false,
});

const REDIRECTS = new Set([301, 302, 303, 307, 308]);
/** fetch's own limit on redirects followed. */
const MAX_REDIRECTS = 20;

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
async function sendPaid(fetchImpl, input, init, headers, base, observe) {
  const mode = init.redirect ?? (base ? base.redirect : undefined) ?? 'follow';
  if (mode !== 'follow') {
    const response = await fetchImpl(base ? base.clone() : input, { ...init, headers });
    return { response, url: base ? base.url : String(input instanceof URL ? input.href : input) };
  }
  let url = base ? base.url : String(input instanceof URL ? input.href : input);
  let method = (init.method ?? (base ? base.method : 'GET')).toUpperCase();
  let { body } = init;
  let response = await fetchImpl(base ? base.clone() : input, { ...init, headers, redirect: 'manual' });
  const next = new Headers(headers);
  next.delete(HEADER_CHALLENGE);
  next.delete(HEADER_NONCE);
  for (let hops = 0; REDIRECTS.has(response.status) && response.headers.get('location'); hops += 1) {
    if (hops >= MAX_REDIRECTS) throw new TypeError(`more than ${MAX_REDIRECTS} redirects`);
    observe(url, response);
    url = new URL(response.headers.get('location'), url).href;
    discard(response);
    if ((response.status === 303 && method !== 'HEAD') || ([301, 302].includes(response.status) && method === 'POST')) {
      method = 'GET';
      body = undefined;
      next.delete('content-type');
    }
    response = await fetchImpl(url, { ...init, method, body, headers: next, redirect: 'manual' });
  }
  return { response, url };
}

/**
 * Wraps a fetch-compatible function (the global fetch, undici's, one
 * handed to ky or axios) so that it pays pow-shield's challenges.
 * options: maxDifficulty (hex digits), maxSolveTimeMs (30 000; 0 or null:
 * no limit), preferWait (true, or the longest Retry-After in ms worth
 * waiting instead of paying), maxWaitMs (60 000), maxRetries (5), threads,
 * inFlight (4: requests in flight per origin, n - 1 for the server's n
 * strikes, until its Remaining shows room; every call of the returned
 * fetch shares that gate), payAhead (true: solve each response's next
 * challenge at once and send it with the next request to that origin),
 * pace (false; true: when Remaining reaches 0, wait for the reset, up to
 * maxWaitMs, instead of paying).
 */
function withPowShield(fetchImpl, options = {}, shared = undefined) {
  if (typeof fetchImpl !== 'function') throw new TypeError('withPowShield needs a fetch function');
  const policy = { ...DEFAULTS, ...options };
  const inFlight = (shared && shared.gate) ?? new Gate(policy.inFlight);
  const ahead = (shared && shared.ahead) ?? new Ahead();
  const pacers = (shared && shared.pacers) ?? new Map();
  if (!pacers.has(policy.maxWaitMs)) pacers.set(policy.maxWaitMs, new Pacer(policy.maxWaitMs));
  const pacing = pacers.get(policy.maxWaitMs);
  const solveOptions = {
    threads: policy.threads,
    maxSolveTimeMs: policy.maxSolveTimeMs,
    maxDifficulty: policy.maxDifficulty,
  };
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
    const url = base ? base.url : String(input instanceof URL ? input.href : input);
    // Held through every send, solve and wait of this request.
    const pass = await inFlight.enter(url, signal);
    try {
      if (policy.pace) await pacing.before(url, signal);
      return await payThrough(input, init, base, { given, signal, pass, url });
    } finally {
      if (policy.pace) pacing.abandon(url);
      pass.release();
    }
  }

  /** Every answer: its quota, and its next challenge solved ahead (not when pacing will wait instead). */
  function observe(url, response, given) {
    pacing.record(url, response);
    if (!policy.payAhead || (policy.pace && pacing.wouldWait(url))) return;
    ahead.offer(scopeOf(url, given), response, solveOptions);
  }

  async function payThrough(input, init, base, { given, signal, pass, url }) {
    let solution = policy.payAhead ? await ahead.take(scopeOf(url, given), signal) : null;
    let prepaid = solution !== null;
    let retries = 0;
    for (;;) {
      const headers = new Headers(given);
      if (solution) {
        headers.set(HEADER_CHALLENGE, solution.token);
        headers.set(HEADER_NONCE, solution.nonce);
      }
      if (retries > 0) pass.resending();
      let response;
      if (solution) {
        const sent = await sendPaid(fetchImpl, input, init, headers, base, (u, r) => observe(u, r, given));
        response = sent.response;
        observe(sent.url, response, given);
      } else {
        response = await fetchImpl(base ? base.clone() : input, { ...init, headers });
        observe(response.url || url, response, given);
      }
      pass.saw(response);
      checkBlocked(response);
      // A solution sent ahead and refused by the shield (400 or 403, its
      // JSON telling) without a fresh challenge: the request again without
      // it, as if there had been none (the 429 path). The application's
      // own 400 or 403 is the answer, never sent twice.
      const refusedAhead = prepaid && await isRefusal(response);
      prepaid = false;
      let move = null;
      const delay = retryAfterMs(response.headers);
      if (refusedAhead) {
        move = { wait: 0 };
      } else if (response.status === 503) {
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

/** powFetch's gates (one per inFlight), solutions ahead and pacers (one per maxWaitMs): all its calls share them. */
const sharedGates = new Map();
const sharedAhead = new Ahead();
const sharedPacers = new Map();

/** The global fetch, paying its way: `powFetch(url, init)`; options as withPowShield's, in `init.powShield`. */
function powFetch(input, init = {}) {
  const { powShield, ...rest } = init;
  const floor = (powShield && powShield.inFlight) ?? DEFAULT_IN_FLIGHT;
  if (!sharedGates.has(floor)) sharedGates.set(floor, new Gate(floor));
  const shared = { gate: sharedGates.get(floor), ahead: sharedAhead, pacers: sharedPacers };
  return withPowShield(globalThis.fetch, powShield, shared)(input, rest);
}

module.exports = { DEFAULT_MAX_RETRIES, DEFAULT_MAX_WAIT_MS, withPowShield, powFetch };
