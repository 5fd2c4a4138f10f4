'use strict';
// Signing as a known bot (Web Bot Auth, docs/bots.md): a request carries a
// fresh RFC 9421 signature of the bot's Ed25519 key (Signature-Input,
// Signature, and Signature-Agent when the bot names its key directory), so
// that a pow-shield server holding the bot's keys (pow_shield_bot_keys) sets
// $pow_shield_bot for it. The signature base is RFC 9421 section 2.5's,
// covering @authority (and signature-agent, by its Dictionary member, when
// sent), with the parameters in the draft's order (created, keyid, alg,
// expires, nonce, tag): the same bytes as the Rust and Python clients'. The
// Ed25519 signature is node:crypto's.
//
// A signer made with whenAsked stays anonymous until an origin asks for a
// Web Bot Auth signature (a 429 with Accept-Signature, RFC 9421 section
// 5.1): that request is sent again once, signed, and every later one to the
// origin is signed.
const crypto = require('node:crypto');
const fs = require('node:fs');

/** The label of the clients' signatures. */
const LABEL = 'sig1';
/** How long each signature is good for, seconds (the server allows 1 h). */
const DEFAULT_LIFETIME = 60;
const MAX_LIFETIME = 3600;
/** The headers a signature sets (a caller's own are replaced). */
const SIGNATURE_HEADERS = ['Signature-Agent', 'Signature-Input', 'Signature'];
/** The response header that asks for a signature. */
const ACCEPT_SIGNATURE = 'Accept-Signature';
/** The components a signature of this client covers. */
const SIGNED = new Set(['@authority', 'signature-agent']);
/** PKCS #8 DER of an Ed25519 private key, before its 32 secret bytes (RFC 8410). */
const PKCS8_ED25519 = Buffer.from('302e020100300506032b657004220420', 'hex');

function b64url(bytes) {
  return Buffer.from(bytes).toString('base64url');
}

/** An RFC 8941 String: printable ASCII, with \ and " escaped. */
function sfString(value) {
  if (!/^[\x20-\x7e]*$/.test(value)) throw new TypeError(`cannot sign ${JSON.stringify(value)}: not printable ASCII`);
  return `"${value.replace(/[\\"]/g, (c) => `\\${c}`)}"`;
}

/** @authority of a URL (RFC 9421 section 2.2.3): the host, and the port unless the scheme's default, lower-case. */
function authorityOf(url) {
  let parsed;
  try {
    parsed = new URL(url);
  } catch {
    throw new TypeError(`cannot sign ${url}: not a URL`);
  }
  if (!['http:', 'https:'].includes(parsed.protocol) || !parsed.host) {
    throw new TypeError(`cannot sign ${url}: not an http(s) URL`);
  }
  return parsed.host.toLowerCase(); // WHATWG URL leaves out the default port
}

function originOf(url) {
  try {
    return `${new URL(url).protocol}//${authorityOf(url)}`;
  } catch {
    return null;
  }
}

/**
 * Just enough of an RFC 8941 parser for Accept-Signature: a Dictionary of
 * Inner Lists of Strings (or Tokens), with parameters. Throws on anything
 * else.
 */
function parseRequests(text) {
  let pos = 0;
  const fail = () => { throw new SyntaxError(`Accept-Signature: at ${pos}`); };
  const space = () => { while (text[pos] === ' ' || text[pos] === '\t') pos += 1; };
  const eat = (c) => (text[pos] === c ? (pos += 1, true) : false);
  const match = (re) => {
    re.lastIndex = pos;
    const m = re.exec(text);
    if (!m) fail();
    pos = re.lastIndex;
    return m[0];
  };
  const KEY = /[a-z*][a-z0-9_.*-]*/y;
  const TOKEN = /[A-Za-z0-9!#$%&'*+.^_`|~:/-]+/y;
  const string = () => {
    if (!eat('"')) fail();
    let out = '';
    while (pos < text.length) {
      const c = text[pos++];
      if (c === '\\' && pos < text.length) out += text[pos++];
      else if (c === '"') return out;
      else out += c;
    }
    return fail();
  };
  const bare = () => (text[pos] === '"' ? string() : match(TOKEN));
  const params = () => {
    const p = {};
    while (eat(';')) {
      space();
      const key = match(KEY);
      p[key] = eat('=') ? bare() : true;
    }
    return p;
  };
  const members = [];
  space();
  while (pos < text.length) {
    match(KEY);
    if (!eat('=') || !eat('(')) fail();
    const items = [];
    for (;;) {
      space();
      if (eat(')')) break;
      items.push([bare(), params()]);
      if (pos < text.length && text[pos] !== ' ' && text[pos] !== ')') fail();
    }
    members.push({ items, params: params() });
    space();
    if (pos < text.length) {
      if (!eat(',')) fail();
      space();
      if (pos === text.length) fail();
    }
  }
  return members;
}

/**
 * Whether an Accept-Signature value asks for the signature this client
 * makes: a member with tag="web-bot-auth", whose alg, if any, is ed25519,
 * covering nothing but @authority (and signature-agent). A value that does
 * not parse asks nothing.
 */
function asksWebBotAuth(value) {
  if (!value) return false;
  let members;
  try {
    members = parseRequests(String(value).trim());
  } catch {
    return false;
  }
  return members.some(({ items, params }) => params.tag === 'web-bot-auth'
    && (params.alg === undefined || params.alg === 'ed25519')
    && items.every(([item]) => SIGNED.has(item)));
}

/** Signs requests with a bot's Ed25519 private key (a JWK with d). */
class BotSigner {
  /**
   * jwk: the private JWK (an object or its JSON text; `pow-shield bot-key
   * new` writes one). options: signatureAgent (the bot's key directory
   * URL, sent and signed as Signature-Agent), lifetime (seconds each
   * signature is good for: 60, at most 3600), whenAsked (false: sign every
   * request; true: only once the origin asked, see above).
   */
  constructor(jwk, { signatureAgent = undefined, lifetime = DEFAULT_LIFETIME, whenAsked = false } = {}) {
    const key = typeof jwk === 'string' ? JSON.parse(jwk) : { ...jwk };
    if (key.kty !== 'OKP' || key.crv !== 'Ed25519' || typeof key.d !== 'string') {
      throw new TypeError('not a private Ed25519 JWK (kty OKP, crv Ed25519, d)');
    }
    const secret = Buffer.from(key.d, 'base64url');
    if (secret.length !== 32) throw new TypeError('"d" is not 32 bytes');
    this.key = crypto.createPrivateKey({ key: Buffer.concat([PKCS8_ED25519, secret]), format: 'der', type: 'pkcs8' });
    const { x } = crypto.createPublicKey(this.key).export({ format: 'jwk' });
    if (key.x !== undefined && key.x !== x) throw new TypeError('"x" is not the public key of "d"');
    // RFC 7638: the required members, sorted, no white space.
    const members = JSON.stringify({ crv: 'Ed25519', kty: 'OKP', x });
    this.keyid = b64url(crypto.createHash('sha256').update(members).digest());
    if (!(Number.isInteger(lifetime) && lifetime >= 1 && lifetime <= MAX_LIFETIME)) {
      throw new RangeError(`lifetime must be 1 to ${MAX_LIFETIME} seconds`);
    }
    this.signatureAgent = signatureAgent;
    this.lifetime = lifetime;
    this.whenAsked = Boolean(whenAsked);
    this.askedOrigins = new Set();
  }

  /** The signer of the private JWK in the file at `path`. */
  static fromFile(path, options = {}) {
    return new BotSigner(fs.readFileSync(path, 'utf8'), options);
  }

  /** Whether a request to `url` is signed: always, or (whenAsked) once its origin asked. */
  signs(url) {
    return !this.whenAsked || this.askedOrigins.has(originOf(url));
  }

  /**
   * Takes note of an answer's Accept-Signature from `url`'s origin: true
   * when it asks for this signature and the signer (whenAsked) was not
   * signing there.
   */
  asked(url, acceptSignature) {
    const origin = originOf(url);
    if (!this.whenAsked || origin === null || this.askedOrigins.has(origin) || !asksWebBotAuth(acceptSignature)) {
      return false;
    }
    this.askedOrigins.add(origin);
    return true;
  }

  /**
   * The signature headers of one request to `url` (by default made now,
   * good for `lifetime`, with a random nonce), as a plain object.
   */
  headers(url, { created = undefined, expires = undefined, nonce = undefined, label = LABEL } = {}) {
    const made = created ?? Math.floor(Date.now() / 1000);
    const until = expires ?? made + this.lifetime;
    const once = nonce ?? crypto.randomBytes(32).toString('base64');
    const lines = [`"@authority": ${authorityOf(url)}`];
    let components = '"@authority"';
    const out = {};
    if (this.signatureAgent !== undefined) {
      const member = sfString(this.signatureAgent);
      lines.push(`"signature-agent";key=${sfString(label)}: ${member}`);
      components += ` "signature-agent";key=${sfString(label)}`;
      out['Signature-Agent'] = `${label}=${member}`;
    }
    const params = `(${components});created=${made};keyid=${sfString(this.keyid)};`
      + `alg="ed25519";expires=${until};nonce=${sfString(once)};tag="web-bot-auth"`;
    lines.push(`"@signature-params": ${params}`);
    const signature = crypto.sign(null, Buffer.from(lines.join('\n'), 'ascii'), this.key);
    out['Signature-Input'] = `${label}=${params}`;
    out.Signature = `${label}=:${signature.toString('base64')}:`;
    return out;
  }
}

module.exports = { ACCEPT_SIGNATURE, BotSigner, LABEL, SIGNATURE_HEADERS, asksWebBotAuth, authorityOf };
