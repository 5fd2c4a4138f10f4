'use strict';
// The per-origin in-flight gate: the server's breaker blocks a client at its
// n + 1-th unpaid 429 (n = 5 by default), and a request in flight over the
// limit holds at most one unpaid 429 until it pays. So a client never has
// more than n - 1 requests in flight while it may be over the limit: the
// gate starts at DEFAULT_IN_FLIGHT (4), before the first response too, and
// opens as far as the server's Remaining shows room, closing back on a 429
// or Remaining 0. A pass is held for the whole of one request (its sends,
// solves and Retry-After waits).

/** Requests in flight per origin while over the limit: n - 1 for the default 5 strikes. */
const DEFAULT_IN_FLIGHT = 4;

/** scheme://host:port of a URL (the default port left out, as URL.origin). */
function originOf(url) {
  try {
    return new URL(String(url)).origin;
  } catch {
    return String(url);
  }
}

function count(text) {
  const t = String(text).trim();
  return /^[0-9]+$/.test(t) ? Number(t) : null;
}

/** The requests left unchallenged: the lowest r= of RateLimit, else X-RateLimit-Remaining. */
function remaining(headers) {
  const ietf = headers.get('RateLimit');
  if (ietf) {
    const found = [];
    for (const item of ietf.split(',')) {
      for (const param of item.split(';').slice(1)) {
        const [name, value = ''] = param.trim().split('=');
        if (name === 'r' && count(value) !== null) {
          found.push(count(value));
          break;
        }
      }
    }
    if (found.length) return Math.min(...found);
  }
  const plain = headers.get('X-RateLimit-Remaining');
  return plain === null ? null : count(plain);
}

class Gate {
  constructor(floor = DEFAULT_IN_FLIGHT) {
    if (!Number.isInteger(floor) || floor < 1) throw new RangeError('inFlight must be an integer >= 1');
    this.floor = floor;
    this.origins = new Map();
  }

  slot(key) {
    let o = this.origins.get(key);
    if (!o) {
      o = { inFlight: 0, allowed: this.floor, sent: 0, applied: 0, waiting: [] };
      this.origins.set(key, o);
    }
    return o;
  }

  inFlight(url) { return this.slot(originOf(url)).inFlight; }

  allowed(url) { return this.slot(originOf(url)).allowed; }

  /** Resolves with a pass once a request to url's origin may be sent; an aborted wait holds no place. */
  enter(url, signal) {
    const key = originOf(url);
    const o = this.slot(key);
    const admit = () => {
      o.inFlight += 1;
      o.sent += 1;
      return new Pass(this, o, o.sent);
    };
    if (o.inFlight < o.allowed && o.waiting.length === 0) return Promise.resolve(admit());
    return new Promise((resolve, reject) => {
      if (signal && signal.aborted) return reject(signal.reason);
      const waiter = () => {
        if (signal) signal.removeEventListener('abort', onAbort);
        resolve(admit());
      };
      const onAbort = () => {
        o.waiting.splice(o.waiting.indexOf(waiter), 1);
        reject(signal.reason);
      };
      if (signal) signal.addEventListener('abort', onAbort, { once: true });
      o.waiting.push(waiter);
    });
  }

  wake(o) {
    while (o.waiting.length && o.inFlight < o.allowed) o.waiting.shift()();
  }
}

class Pass {
  constructor(gate, origin, ticket) {
    this.gate = gate;
    this.origin = origin;
    this.ticket = ticket;
    this.held = true;
  }

  /** Before each resend: its answer is then the newest the origin has seen. */
  resending() {
    this.origin.sent += 1;
    this.ticket = this.origin.sent;
  }

  /** A 429 or Remaining 0 closes the gate; a lower Remaining always applies, a higher one only from the newest send. */
  saw(response) {
    const o = this.origin;
    let room;
    if (response.status === 429) room = this.gate.floor;
    else {
      const left = remaining(response.headers);
      if (left === null) return;
      room = Math.max(this.gate.floor, left);
    }
    if (room <= o.allowed || this.ticket >= o.applied) {
      o.allowed = room;
      o.applied = Math.max(o.applied, this.ticket);
    }
    this.gate.wake(o);
  }

  /** Gives the place back (once). */
  release() {
    if (!this.held) return;
    this.held = false;
    this.origin.inFlight = Math.max(0, this.origin.inFlight - 1);
    this.gate.wake(this.origin);
  }
}

module.exports = { DEFAULT_IN_FLIGHT, Gate, originOf, remaining };
