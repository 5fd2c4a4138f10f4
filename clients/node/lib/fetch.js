'use strict';
// `withPowShield(fetch)`: a fetch that pays pow-shield's challenges and sends
// the request again; `powFetch` is it around the global fetch.
const { HEADER_CHALLENGE, HEADER_NONCE, HEADER_SOLUTION } = require('./challenge');
const { DEFAULT_IN_FLIGHT, Gate } = require('./gate');
const { Ahead } = require('./ahead');
const { DEFAULT_MAX_RETRIES, DEFAULT_MAX_WAIT_MS, Payer } = require('./pay');
const { SIGNATURE_HEADERS } = require('./bots');

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

/** `headers` with the signature `sign(url)` gives, in place of any there (none when it gives null). */
function signed(headers, sign, url) {
  const out = new Headers(headers);
  for (const name of SIGNATURE_HEADERS) out.delete(name);
  for (const [name, value] of Object.entries(sign(url) ?? {})) out.set(name, value);
  return out;
}

/**
 * One send of a request that carries a solution or a signature. The
 * solution buys this URL one request only, and a signature is good for
 * one authority and one use: redirects are followed here (as fetch's
 * 'follow' would) without the X-PoW-* headers, so that they never reach
 * another origin (nor are they spent twice at this one), each hop signed
 * afresh (`sign(url)`).
 */
async function sendPaid(fetchImpl, input, init, headers, base, observe, sign) {
  const mode = init.redirect ?? (base ? base.redirect : undefined) ?? 'follow';
  let url = base ? base.url : String(input instanceof URL ? input.href : input);
  if (mode !== 'follow') {
    const response = await fetchImpl(base ? base.clone() : input, { ...init, headers: signed(headers, sign, url) });
    return { response, url };
  }
  let method = (init.method ?? (base ? base.method : 'GET')).toUpperCase();
  let { body } = init;
  let response = await fetchImpl(base ? base.clone() : input,
    { ...init, headers: signed(headers, sign, url), redirect: 'manual' });
  const next = new Headers(headers);
  next.delete(HEADER_CHALLENGE);
  next.delete(HEADER_NONCE);
  next.delete(HEADER_SOLUTION);
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
    response = await fetchImpl(url, { ...init, method, body, headers: signed(next, sign, url), redirect: 'manual' });
  }
  return { response, url };
}

/**
 * Wraps a fetch-compatible function (the global fetch, undici's, the one
 * ky takes as its `fetch` option) so that it pays pow-shield's challenges.
 * options: maxDifficulty (hex digits), maxSolveTimeMs (30 000; 0 or null:
 * no limit), preferWait (true, or the longest Retry-After in ms worth
 * waiting instead of paying), maxWaitMs (60 000), maxRetries (5), threads,
 * inFlight (4: requests in flight per origin, n - 1 for the server's n
 * strikes, until its Remaining shows room; every call of the returned
 * fetch shares that gate), payAhead (true: solve each response's next
 * challenge at once and send it with the next request to that origin),
 * pace (false; true: when Remaining reaches 0, wait for the reset, up to
 * maxWaitMs, instead of paying), bot (a BotSigner: each send and each
 * redirect hop signed afresh as that known bot, or, made whenAsked, once
 * its origin asked).
 */
function withPowShield(fetchImpl, options = {}, shared = undefined) {
  if (typeof fetchImpl !== 'function') throw new TypeError('withPowShield needs a fetch function');
  const payer = new Payer(options, shared);

  async function powShieldFetch(input, init = {}) {
    const isRequest = typeof Request !== 'undefined' && input instanceof Request;
    const signal = init.signal ?? (isRequest ? input.signal : undefined);
    const base = isRequest ? input : null;
    const given = new Headers(init.headers ?? (isRequest ? input.headers : undefined));
    const url = base ? base.url : String(input instanceof URL ? input.href : input);
    const transport = {
      replayable: replayable(init.body),
      discard: (sent) => discard(sent.response),
      async send(solution, observe, sign) {
        const headers = new Headers(given);
        if (!solution && !payer.signer) {
          const response = await fetchImpl(base ? base.clone() : input, { ...init, headers });
          return { response, answer: response, url: response.url || url };
        }
        if (solution) {
          headers.set(HEADER_CHALLENGE, solution.token);
          headers.set(HEADER_NONCE, solution.nonce);
          if (solution.solution) headers.set(HEADER_SOLUTION, solution.solution);
        }
        const sent = await sendPaid(fetchImpl, input, init, headers, base, observe, sign);
        return { response: sent.response, answer: sent.response, url: sent.url };
      },
    };
    return (await payer.request(url, given, signal, transport)).answer;
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
