'use strict';
// A scripted HTTP server for the client's tests: each request gets the next
// answer of `script`; requests are recorded. Tokens are made here (the
// client never checks their MAC).
const http = require('node:http');
const { createHash, randomBytes } = require('node:crypto');

function b64url(buf) {
  return Buffer.from(buf).toString('base64url');
}

function makeToken(payload) {
  return `${b64url(JSON.stringify(payload))}.${b64url(randomBytes(32))}`;
}

function zeroBits(salt, nonce) {
  const d = createHash('sha256').update(salt + nonce).digest();
  let z = 0;
  for (const b of d) {
    if (b === 0) { z += 8; continue; }
    return z + Math.clz32(b) - 24;
  }
  return z;
}

class FakeServer {
  constructor() {
    this.script = [];
    this.requests = [];
    this.issued = [];
    /** The next challenges sent ahead (X-PoW-Next-*), in order. */
    this.nexts = [];
    /** The X-RateLimit-Reset values sent (epoch seconds), in order. */
    this.resets = [];
    this.server = http.createServer((req, res) => {
      const chunks = [];
      req.on('data', (c) => chunks.push(c));
      req.on('end', () => {
        this.requests.push({
          method: req.method, url: req.url, headers: req.headers, body: Buffer.concat(chunks).toString(), at: Date.now(),
        });
        const answer = this.script.shift() || this.ok('end of script');
        answer(req, res);
      });
    });
  }

  async start() {
    await new Promise((r) => this.server.listen(0, '127.0.0.1', r));
    this.url = `http://127.0.0.1:${this.server.address().port}/items`;
    return this;
  }

  close() {
    this.server.closeAllConnections?.();
    return new Promise((r) => this.server.close(r));
  }

  ok(body = 'items') {
    return (req, res) => {
      res.writeHead(200, { 'Content-Type': 'text/plain' });
      res.end(body);
    };
  }

  /** A challenge answer; `inBody`: the token only in the problem details body. */
  challenge({ status = 429, difficulty = 2, bits, retryAfter, inBody = false, headers = {}, contentType = 'application/json', token } = {}) {
    return (req, res) => {
      const salt = randomBytes(16).toString('hex');
      const payload = { ip: '127.0.0.1', ts: Date.now(), difficulty, salt, exp: Date.now() + 60_000 };
      if (bits !== undefined) payload.bits = bits;
      const t = token ?? makeToken(payload);
      this.issued.push({ token: t, salt, difficulty, bits });
      const h = { 'Content-Type': contentType };
      if (!inBody) {
        h['X-PoW-Challenge'] = t;
        h['X-PoW-Difficulty'] = String(difficulty);
      }
      if (retryAfter !== undefined) h['Retry-After'] = String(retryAfter);
      Object.assign(h, headers);
      res.writeHead(status, h);
      res.end(JSON.stringify({
        type: 'https://iana.org/assignments/http-problem-types#quota-exceeded',
        title: 'PoW challenge required', status, detail: 'solve it',
        error: 'PoW challenge required', challenge: t, difficulty, salt,
        algorithm: 'sha256', expires_in: 60, instructions: '...',
      }));
    };
  }

  /**
   * An answer carrying the next challenge, as the module sends one after
   * which no free request is left and to every paid request; with the
   * quota headers (`remaining`, `resetIn` seconds: RateLimit's t= and the
   * epoch X-RateLimit-Reset). `next: false`: the quota headers alone.
   */
  ahead({ status = 200, body = 'items', difficulty = 2, bits, ts, exp, remaining = 0, resetIn = 60, next = true, headers = {} } = {}) {
    return (req, res) => {
      const reset = Math.ceil(Date.now() / 1000) + resetIn;
      this.resets.push(reset);
      const h = {
        'Content-Type': 'text/plain',
        'X-RateLimit-Limit': '1',
        'X-RateLimit-Remaining': String(remaining),
        'X-RateLimit-Reset': String(reset),
        RateLimit: `"pow-shield";r=${remaining};t=${resetIn}`,
      };
      if (next) {
        const salt = randomBytes(16).toString('hex');
        const want = bits ?? 4 * difficulty;
        const issued = ts ?? Date.now();
        const payload = { ip: '127.0.0.1', ts: issued, difficulty, salt, exp: exp ?? issued + 60_000 };
        if (bits !== undefined) payload.bits = bits;
        const token = makeToken(payload);
        this.nexts.push({ token, salt, bits: want, request: this.requests.length - 1 });
        Object.assign(h, {
          'X-PoW-Next-Challenge': token, 'X-PoW-Next-Bits': String(want), 'X-PoW-Next-Difficulty': String(difficulty),
        });
      }
      Object.assign(h, headers);
      res.writeHead(status, h);
      res.end(body);
    };
  }

  blocked(shield = 'blocked') {
    return (req, res) => {
      res.writeHead(403, { 'Content-Type': 'text/plain', 'X-PoW-Shield': shield });
      res.end('Blocked by Circuit Breaker');
    };
  }

  status(code, headers = {}, body = '') {
    return (req, res) => {
      res.writeHead(code, headers);
      res.end(body);
    };
  }
}

/** Whether request `i` carries a solution of the `j`-th issued challenge (by default the i-th) meeting `bits`. */
function paid(server, i, bits, j = i - 1) {
  const req = server.requests[i];
  const issued = server.issued[j];
  return req.headers['x-pow-challenge'] === issued.token
    && zeroBits(issued.salt, req.headers['x-pow-nonce']) >= bits;
}

/** Whether request `i` carries a solution of the `j`-th next challenge sent ahead. */
function paidAhead(server, i, j) {
  const req = server.requests[i];
  const next = server.nexts[j];
  return req.headers['x-pow-challenge'] === next.token
    && zeroBits(next.salt, req.headers['x-pow-nonce']) >= next.bits;
}

/** Whether request `i` carries no solution at all. */
function unpaid(server, i) {
  const h = server.requests[i].headers;
  return h['x-pow-challenge'] === undefined && h['x-pow-nonce'] === undefined;
}

/** A server that holds each request 30 ms and notes how many it held at once. */
async function counting(left = '0') {
  const seen = { now: 0, most: 0, requests: [] };
  const server = http.createServer((req, res) => {
    seen.requests.push(req.headers);
    seen.most = Math.max(seen.most, ++seen.now);
    setTimeout(() => {
      seen.now -= 1;
      res.writeHead(200, { 'X-RateLimit-Remaining': left });
      res.end('ok');
    }, 30);
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  seen.url = `http://127.0.0.1:${server.address().port}/items`;
  seen.close = () => { server.closeAllConnections?.(); return new Promise((r) => server.close(r)); };
  return seen;
}

module.exports = { FakeServer, counting, makeToken, paid, paidAhead, unpaid, zeroBits };
