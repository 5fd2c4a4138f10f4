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
    this.server = http.createServer((req, res) => {
      const chunks = [];
      req.on('data', (c) => chunks.push(c));
      req.on('end', () => {
        this.requests.push({ method: req.method, url: req.url, headers: req.headers, body: Buffer.concat(chunks).toString() });
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

/** Whether request `i` carries a solution of the i-th issued challenge meeting `bits`. */
function paid(server, i, bits) {
  const req = server.requests[i];
  const issued = server.issued[i - 1];
  return req.headers['x-pow-challenge'] === issued.token
    && zeroBits(issued.salt, req.headers['x-pow-nonce']) >= bits;
}

module.exports = { FakeServer, makeToken, paid, zeroBits };
