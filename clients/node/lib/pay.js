'use strict';
// What a paying client does with a request, whatever sends it: the global
// fetch (fetch.js: withPowShield, powFetch) or an axios instance (axios.js:
// withPowShieldAxios). The gate (gate.js) is held for the whole request; with
// `pace` the request first waits for the reset (pace.js); a solution found
// ahead (ahead.js) goes with it; each answer is observed (its quota, its
// next challenge), a block throws, and a challenge is paid (or a Retry-After
// slept) and the request sent again. With a `bot` (bots.js), each send is
// signed (or, whenAsked, once its origin asked: the asking answer's request
// is sent again, signed, once). The caller gives a transport: how one send
// is made, and whether the body can be sent again.
const { readChallenge, checkBlocked, isRefusal, retryAfterMs } = require('./challenge');
const { PowShieldError, RetriesExhaustedError } = require('./errors');
const { DEFAULT_MAX_SOLVE_TIME_MS, solveChallenge } = require('./solver');
const { DEFAULT_IN_FLIGHT, Gate } = require('./gate');
const { Ahead, scopeOf } = require('./ahead');
const { Pacer, sleep } = require('./pace');
const { ACCEPT_SIGNATURE } = require('./bots');

/** Statuses whose Accept-Signature has a signer made whenAsked send the request again, signed. */
const SIGN_STATUSES = new Set([401, 403, 429]);

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
  bot: undefined,
});

/**
 * The state one paying client keeps (its gate, its solutions ahead, its
 * pacer) and the loop of one request. `shared` ({ gate, ahead, pacers })
 * lets several clients keep one state (powFetch's calls).
 */
class Payer {
  constructor(options = {}, shared = undefined) {
    const policy = { ...DEFAULTS, ...options };
    if (!(policy.maxRetries >= 0)) throw new RangeError('maxRetries must be >= 0');
    if (!(policy.maxWaitMs >= 0)) throw new RangeError('maxWaitMs must be >= 0');
    if (policy.bot !== undefined && !(policy.bot && typeof policy.bot.headers === 'function'
      && typeof policy.bot.signs === 'function' && typeof policy.bot.asked === 'function')) {
      throw new TypeError('bot must be a BotSigner');
    }
    this.policy = policy;
    this.signer = policy.bot ?? null;
    this.gate = (shared && shared.gate) ?? new Gate(policy.inFlight);
    this.ahead = (shared && shared.ahead) ?? new Ahead();
    const pacers = (shared && shared.pacers) ?? new Map();
    if (!pacers.has(policy.maxWaitMs)) pacers.set(policy.maxWaitMs, new Pacer(policy.maxWaitMs));
    this.pacing = pacers.get(policy.maxWaitMs);
    this.solveOptions = {
      threads: policy.threads,
      maxSolveTimeMs: policy.maxSolveTimeMs,
      maxDifficulty: policy.maxDifficulty,
    };
  }

  wantsWait(delay) {
    const { preferWait, maxWaitMs } = this.policy;
    if (delay === null || preferWait === false || delay > maxWaitMs) return false;
    return preferWait === true || delay <= preferWait;
  }

  /** The signature headers of a send to `url` (an object), or null when it goes unsigned. */
  signHeaders(url) {
    return this.signer && this.signer.signs(url) ? this.signer.headers(url) : null;
  }

  /** Every answer (a fetch Response, or a view of one): its quota, and its next challenge solved ahead (not when pacing will wait instead). */
  observe(url, response, given) {
    this.pacing.record(url, response);
    if (!this.policy.payAhead || (this.policy.pace && this.pacing.wouldWait(url))) return;
    this.ahead.offer(scopeOf(url, given), response, this.solveOptions);
  }

  /**
   * One request to `url` through to its answer. `given`: the request's
   * headers (a Headers; its Authorization and Cookie scope a solution);
   * `signal`: an AbortSignal or undefined. `transport`:
   *   send(solution, observe, sign): one send, with the solution ({ token,
   *     nonce }) or none (null), and the headers sign(url) gives (null:
   *     unsigned) for it and for each redirect it follows; resolves to
   *     { response, answer, url }: `response` a
   *     fetch Response to read (status, headers, a clone's body), `answer`
   *     what the caller hands back and the errors carry (the same for
   *     fetch), `url` where the answer came from. A send that follows
   *     redirects itself calls observe(url, response) for each hop.
   *   replayable: whether the body can be sent a second time.
   *   discard(sent): frees an answer that is not handed back.
   * Resolves to the last send's { response, answer, url }.
   */
  async request(url, given, signal, transport) {
    // Held through every send, solve and wait of this request.
    const pass = await this.gate.enter(url, signal);
    try {
      if (this.policy.pace) await this.pacing.before(url, signal);
      return await this.payThrough(url, given, signal, pass, transport);
    } finally {
      if (this.policy.pace) this.pacing.abandon(url);
      pass.release();
    }
  }

  async payThrough(url, given, signal, pass, transport) {
    const { policy } = this;
    let solution = policy.payAhead ? await this.ahead.take(scopeOf(url, given), signal) : null;
    let prepaid = solution !== null;
    let retries = 0;
    let sends = 0;
    for (;;) {
      if (sends > 0) pass.resending();
      sends += 1;
      const signed = this.signer !== null && this.signer.signs(url);
      const sent = await transport.send(solution, (u, r) => this.observe(u, r, given), (u) => this.signHeaders(u));
      const { response, answer } = sent;
      this.observe(sent.url || url, response, given);
      pass.saw(response);
      let move;
      try {
        move = await this.nextMove(response, prepaid, retries, signed ? null : url);
      } catch (e) {
        // The errors name what the caller was given, not the view read here.
        if (e instanceof PowShieldError && e.response === response) e.response = answer;
        throw e;
      }
      prepaid = false;
      if (move === null) return sent;
      if (move.sign && transport.replayable) {
        // asked to sign: sent again, signed (not one of maxRetries)
        transport.discard(sent);
        solution = null;
        continue;
      }
      if (retries >= policy.maxRetries) {
        transport.discard(sent);
        throw new RetriesExhaustedError(
          `still HTTP ${response.status} after ${retries} retr${retries === 1 ? 'y' : 'ies'}`, answer);
      }
      if (!transport.replayable) {
        transport.discard(sent);
        throw new PowShieldError(
          `HTTP ${response.status} asks to send the request again, but its body is a stream that cannot be sent twice`,
          answer);
      }
      retries += 1;
      if (move.wait !== undefined) {
        transport.discard(sent);
        await sleep(move.wait, signal);
        solution = null;
      } else {
        const c = move.pay;
        try {
          const proof = await solveChallenge(c, { ...this.solveOptions, signal, response: answer });
          solution = { token: c.token, ...proof };
        } finally {
          transport.discard(sent);
        }
      }
    }
  }

  /**
   * What to do after an answer: null (hand it back), { wait: ms } (sleep,
   * send again unchanged), { pay: challenge } or { sign: true } (send
   * again, signed). Throws BlockedError for a block. `prepaid`: the
   * request carried a solution found ahead; `unsignedUrl`: the URL of a
   * request sent unsigned (null: signed).
   */
  async nextMove(response, prepaid, retries, unsignedUrl = null) {
    checkBlocked(response);
    // Any answer that asks makes the origin's later requests signed.
    if (unsignedUrl !== null && this.signer !== null
      && this.signer.asked(unsignedUrl, response.headers.get(ACCEPT_SIGNATURE))
      && SIGN_STATUSES.has(response.status)) {
      return { sign: true };
    }
    // A solution sent ahead and refused by the shield (400 or 403, its
    // JSON telling) without a fresh challenge: the request again without
    // it, as if there had been none (the 429 path). The application's
    // own 400 or 403 is the answer, never sent twice.
    if (prepaid && await isRefusal(response)) return { wait: 0 };
    const delay = retryAfterMs(response.headers);
    if (response.status === 503) return this.wantsWait(delay) ? { wait: delay } : null;
    const challenge = await readChallenge(response);
    if (!challenge) return null;
    const last = retries + 1 >= this.policy.maxRetries;
    return challenge.status === 429 && !last && this.wantsWait(challenge.retryAfterMs)
      ? { wait: challenge.retryAfterMs }
      : { pay: challenge };
  }
}

module.exports = { DEFAULT_MAX_RETRIES, DEFAULT_MAX_WAIT_MS, DEFAULTS, Payer };
