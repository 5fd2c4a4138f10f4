'use strict';
// Pacing (option `pace`): from each response's RateLimit (r=, t=) or
// X-RateLimit-Remaining / -Reset, the client knows when its free requests
// to an origin have run out; the next request then waits (an async sleep)
// until the reset instead of paying: no 429, no work. A reset further away
// than maxWaitMs is not waited for (that request pays). After a wait, or
// before the first answer, one request goes first and the others follow
// its answer.
const { originOf } = require('./gate');

function count(text) {
  const t = String(text).trim();
  return /^[0-9]+$/.test(t) ? Number(t) : null;
}

/**
 * The remaining requests and when they reset (epoch ms) from a response's
 * headers: the IETF RateLimit item with the lowest r= (its t= seconds
 * from now), else X-RateLimit-Remaining and -Reset (epoch seconds); null
 * without them.
 */
function quota(headers, now = Date.now()) {
  let best = null;
  for (const item of (headers.get('RateLimit') || '').split(',')) {
    const params = {};
    for (const param of item.split(';').slice(1)) {
      const [name, value = ''] = param.trim().split('=');
      params[name] = count(value);
    }
    if (params.r == null) continue;
    if (best === null || params.r < best.remaining) {
      best = { remaining: params.r, resetAt: params.t == null ? null : now + 1000 * params.t };
    }
  }
  if (best) return best;
  const remaining = count(headers.get('X-RateLimit-Remaining') ?? '');
  if (remaining === null) return null;
  const reset = count(headers.get('X-RateLimit-Reset') ?? '');
  return { remaining, resetAt: reset === null ? null : 1000 * reset };
}

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

class Pacer {
  constructor(maxWaitMs) {
    this.maxWaitMs = maxWaitMs;
    this.origins = new Map();
    /** Requests that waited for a reset (for tests and the curious). */
    this.waits = 0;
  }

  slot(url) {
    const key = originOf(url);
    let o = this.origins.get(key);
    if (!o) {
      o = { remaining: null, resetAt: null, probe: null };
      this.origins.set(key, o);
    }
    return o;
  }

  /** Whether the next request to url's origin would wait for its reset rather than pay. */
  wouldWait(url, now = Date.now()) {
    const o = this.slot(url);
    return o.remaining !== null && o.remaining <= 0 && o.resetAt !== null
      && o.resetAt > now && o.resetAt - now <= this.maxWaitMs;
  }

  /** Reads the quota of a response from url's origin. */
  record(url, response) {
    const q = quota(response.headers);
    const o = this.slot(url);
    if (q) {
      o.remaining = q.remaining;
      o.resetAt = q.resetAt;
    }
    if (o.probe) {
      o.probe.done();
      o.probe = null;
    }
  }

  /** Resolves when a request to url's origin may be sent without paying, as far as the client knows. */
  async before(url, signal) {
    const o = this.slot(url);
    for (;;) {
      if (o.remaining !== null && o.remaining > 0) {
        o.remaining -= 1;
        return;
      }
      if (o.remaining === null) {
        if (!o.probe) {
          let done;
          const settled = new Promise((resolve) => { done = resolve; });
          o.probe = { settled, done };
          return;
        }
        await o.probe.settled;
        continue;
      }
      const wait = o.resetAt === null ? Infinity : o.resetAt - Date.now();
      if (wait > this.maxWaitMs) return; // too far: pay
      if (wait > 0) {
        this.waits += 1;
        await sleep(wait, signal);
      }
      // The window moved: how much it freed is known from the next answer.
      if (o.remaining !== null && o.remaining <= 0 && (o.resetAt === null || o.resetAt <= Date.now())) {
        o.remaining = null;
      }
    }
  }

  /** A request that got no answer gives its turn back. */
  abandon(url) {
    const o = this.slot(url);
    if (o.probe) {
      o.probe.done();
      o.probe = null;
    }
  }
}

module.exports = { Pacer, quota, sleep };
