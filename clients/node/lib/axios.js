'use strict';
// `withPowShieldAxios(instance, options)`: an axios instance (axios 1.x) that
// pays pow-shield's challenges as withPowShield's fetch does (pay.js: the
// same gate, solutions ahead, pacing, moves and errors). axios is not a
// dependency: nothing here loads it; the instance brings what is needed.
//
// How: a request interceptor puts a paying adapter in the place of the
// request's own (config.adapter: a name such as 'http' or 'fetch', a list,
// or a function). The paying adapter runs the whole request, its resends
// included, inside one dispatch: the application's interceptors and
// transforms run once per request, never for the 429 in between, and a
// block rejects with BlockedError. Each send goes through a sibling of the
// instance (instance.create(): the same defaults, no interceptors), with the
// request's adapter, its body as already transformed, and no transforms of
// its own; the answer is turned into a fetch Response only to be read
// (status, headers, and the body of a challenge or refusal status). The
// instance's validateStatus decides, as without pow-shield, whether the
// final answer resolves or rejects with axios's error.
const { Payer } = require('./pay');
const { CHALLENGE_STATUSES, HEADER_CHALLENGE, HEADER_NONCE, HEADER_SOLUTION } = require('./challenge');
const { SIGNATURE_HEADERS } = require('./bots');

/** Marks the paying adapter: an adapter already paying is not wrapped again. */
const PAYING = Symbol('pow-shield paying adapter');
/** The headers of a solution: never sent on to a redirect's target. */
const POW_HEADERS = new Set([HEADER_CHALLENGE, HEADER_NONCE, HEADER_SOLUTION].map((h) => h.toLowerCase()));
/** The headers of a signature: made afresh for each send and each redirect hop. */
const SIGNED_HEADERS = new Set(SIGNATURE_HEADERS.map((h) => h.toLowerCase()));
/** Statuses whose body the client may read: a challenge only in the body, the shield's refusal of a solution. */
const READ_BODY = new Set([...CHALLENGE_STATUSES, 400, 403]);
/** Statuses that have no body in a fetch Response. */
const NULL_BODY = new Set([101, 103, 204, 205, 304]);

/** axios's own rule: a URL with a scheme, or protocol-relative. */
function isAbsolute(url) {
  return /^([a-z][a-z\d+\-.]*:)?\/\//i.test(url);
}

/** The URL a request goes to, joined as axios joins baseURL and url (params left out: they change neither origin nor path). */
function urlOf(config) {
  const url = config.url == null ? '' : String(config.url);
  const base = config.baseURL == null ? '' : String(config.baseURL);
  if (!base || (isAbsolute(url) && config.allowAbsoluteUrls !== false)) return url;
  return url ? `${base.replace(/\/?\/$/, '')}/${url.replace(/^\/+/, '')}` : base;
}

/** A header bag's own entries (AxiosHeaders, or a plain object; node's IncomingHttpHeaders). */
function entriesOf(headers) {
  if (!headers || typeof headers !== 'object') return [];
  return Object.keys(headers).map((k) => [k, headers[k]]).filter(([, v]) => typeof v !== 'function');
}

function toHeaders(bag, only = null) {
  const headers = new Headers();
  for (const [key, value] of entriesOf(bag)) {
    if (value == null || value === false) continue;
    if (only && !only.has(key.toLowerCase())) continue;
    for (const one of Array.isArray(value) ? value : [value]) {
      try {
        headers.append(key, String(one));
      } catch {
        // a name or value fetch's Headers refuses: nothing the shield sends
      }
    }
  }
  return headers;
}

/** An answer's body as bytes to read, or null for a stream (not read: the module's challenges are in headers). */
function bytesOf(data) {
  if (data == null) return null;
  if (typeof data === 'string' || data instanceof ArrayBuffer || ArrayBuffer.isView(data)) return data;
  if (typeof data.pipe === 'function' || typeof data.getReader === 'function') return null;
  try {
    return JSON.stringify(data); // the fetch adapter's responseType 'json' parses it already
  } catch {
    return null;
  }
}

/** A fetch Response of an axios answer, to read: status, headers, and the body of a status that may need it. */
function viewOf(answer) {
  const status = Number(answer.status);
  const headers = toHeaders(answer.headers);
  const body = READ_BODY.has(status) && !NULL_BODY.has(status) ? bytesOf(answer.data) : null;
  try {
    return new Response(body, { status, headers });
  } catch {
    return { status, headers, body: null, url: '' }; // a status fetch's Response does not take
  }
}

/** Where the answer came from after redirects (the http adapter's follow-redirects tells), or null. */
function finalUrl(answer) {
  const req = answer.request;
  return (req && req.res && typeof req.res.responseUrl === 'string' && req.res.responseUrl) || null;
}

/** A body that can be sent a second time: anything but a stream. */
function replayable(data) {
  return !(data && typeof data === 'object' && (typeof data.pipe === 'function'
    || typeof data.getReader === 'function' || typeof data[Symbol.asyncIterator] === 'function'));
}

function discard(sent) {
  const data = sent.answer && sent.answer.data;
  if (!data || typeof data !== 'object') return;
  if (typeof data.destroy === 'function') data.destroy();
  else if (typeof data.cancel === 'function') data.cancel().catch(() => {});
}

function strip(headers, names) {
  for (const key of Object.keys(headers || {})) if (names.has(key.toLowerCase())) delete headers[key];
}

/** One send of `config` by `sender` with the request's own adapter (`spec`), with a solution or without, signed as `sign(url)` says. */
function sendOnce(sender, config, spec, url) {
  return async (solution, observe, sign) => {
    const headers = {};
    // Own properties, false included: a header the request removed (false) stays removed.
    for (const [key, value] of entriesOf(config.headers)) {
      if (!POW_HEADERS.has(key.toLowerCase()) && !SIGNED_HEADERS.has(key.toLowerCase())) headers[key] = value;
    }
    const inner = { ...config, headers, adapter: spec, transformRequest: [], transformResponse: [] };
    Object.assign(headers, sign(url) ?? {});
    if (solution) {
      headers[HEADER_CHALLENGE] = solution.token;
      headers[HEADER_NONCE] = solution.nonce;
      if (solution.solution) headers[HEADER_SOLUTION] = solution.solution;
    }
    if (solution || Object.keys(headers).some((k) => SIGNED_HEADERS.has(k.toLowerCase()))) {
      // The solution buys this URL one request, and a signature is good
      // for one authority and one use: the redirects of a paid or signed
      // send go on without the solution, signed afresh (the http adapter,
      // Node's default, asks here).
      const theirs = config.beforeRedirect;
      inner.beforeRedirect = (options, response, request) => {
        strip(options && options.headers, POW_HEADERS);
        if (options && options.headers) {
          strip(options.headers, SIGNED_HEADERS);
          if (typeof options.href === 'string') Object.assign(options.headers, sign(options.href) ?? {});
        }
        if (response && response.headers) {
          observe((request && request.url) || url, viewOf({ status: response.statusCode, headers: response.headers }));
        }
        if (typeof theirs === 'function') theirs(options, response, request);
      };
    }
    let answer;
    let error = null;
    try {
      answer = await sender.request(inner);
    } catch (e) {
      if (e && typeof e === 'object' && 'config' in e) e.config = config; // the request's, not the send's
      if (!e || !e.response) throw e; // no answer: the network's or axios's own error
      error = e; // an answer the request's validateStatus rejects: it may still be a challenge
      answer = e.response;
    }
    answer.config = config;
    return { response: viewOf(answer), answer, error, url: finalUrl(answer) || url };
  };
}

/** The adapter that pays: the request through the payer, each send by the request's own adapter. */
function payingAdapter(payer, sender, spec) {
  const adapter = async (config) => {
    const url = urlOf(config);
    const signal = config.signal && typeof config.signal.addEventListener === 'function' ? config.signal : undefined;
    const given = toHeaders(config.headers, new Set(['authorization', 'cookie']));
    const sent = await payer.request(url, given, signal, {
      replayable: replayable(config.data),
      discard,
      send: sendOnce(sender, config, spec, url),
    });
    if (sent.error) throw sent.error;
    return sent.answer;
  };
  adapter[PAYING] = true;
  return adapter;
}

/**
 * Makes an axios instance (axios.create(), axios 1.x) pay pow-shield's
 * challenges, with withPowShield's options and behaviour: it pays a 429,
 * pays ahead, holds at most `inFlight` requests in flight per origin while
 * over the limit, paces with `pace`, and a block rejects with BlockedError
 * (BannedError), whose `response` is the axios response. Returns the
 * instance. Every request of the instance shares one gate and one set of
 * solutions ahead.
 */
function withPowShieldAxios(instance, options = {}) {
  if (!instance || typeof instance.request !== 'function' || typeof instance.create !== 'function'
    || !instance.interceptors || !instance.interceptors.request) {
    throw new TypeError('withPowShieldAxios needs an axios instance (axios 1.x: axios.create())');
  }
  const payer = new Payer(options);
  // The sends: the instance's defaults, none of its interceptors, and no
  // default headers to add back (the request's are complete by then).
  const sender = instance.create();
  sender.defaults.headers = {};
  instance.interceptors.request.use((config) => {
    const spec = config.adapter;
    if (!(typeof spec === 'function' && spec[PAYING])) config.adapter = payingAdapter(payer, sender, spec);
    return config;
  }, undefined, { synchronous: true });
  return instance;
}

module.exports = { withPowShieldAxios, urlOf };
