// Types of the pow-shield Node.js client (hand-written; the code is lib/*.js).

/** What a paying fetch may do; every field is optional. */
export interface PowShieldOptions {
  /** Refuse (TooDifficultError) a challenge harder than this many hex zeros, before any work. */
  maxDifficulty?: number;
  /** Give up on one challenge after this long (SolveTimeoutError); 0 or null: no limit. Default 30 000. */
  maxSolveTimeMs?: number | null;
  /** true: sleep Retry-After (429, 503) instead of paying; a number: only when Retry-After is at most that many ms. */
  preferWait?: boolean | number;
  /** The longest Retry-After ever slept (a longer 429 is paid, a longer 503 returned). Default 60 000. */
  maxWaitMs?: number;
  /** Paid or waited resends per request before RetriesExhaustedError. Default 5, as every pow-shield client. */
  maxRetries?: number;
  /** Solver threads. Default: one per core. */
  threads?: number;
  /**
   * Requests in flight per origin while over the limit (n - 1 for the server's n strikes), until
   * its RateLimit Remaining shows room; a Promise.all of 50 waits its turn. Default 4.
   */
  inFlight?: number;
  /**
   * Solve the next challenge an answer carries (X-PoW-Next-Challenge) at once, on the solver's
   * threads, and send it with the next request to that origin: one round trip per paid request,
   * no 429. Each solution is sent once; one past its exp is dropped. Default true.
   */
  payAhead?: boolean;
  /**
   * When RateLimit / X-RateLimit-Remaining reaches 0, wait (an async sleep) for the reset, up to
   * maxWaitMs, before the next request to that origin instead of paying. Default false.
   */
  pace?: boolean;
  /**
   * Sign as a known bot (Web Bot Auth): every send, each resend and redirect hop afresh; or, with a
   * signer made `whenAsked`, only once the origin asked (Accept-Signature), that request sent again,
   * signed, once.
   */
  bot?: BotSigner;
}

/** Options of a BotSigner. */
export interface BotSignerOptions {
  /** The bot's key directory URL, sent (and signed) as Signature-Agent. */
  signatureAgent?: string;
  /** Seconds each signature is good for: 1 to 3600. Default 60. */
  lifetime?: number;
  /** Sign only once an origin asks (a 429 with Accept-Signature). Default false: sign every request. */
  whenAsked?: boolean;
}

/** A private Ed25519 JWK, as `pow-shield bot-key new` writes it. */
export interface PrivateJwk {
  kty: 'OKP';
  crv: 'Ed25519';
  d: string;
  x?: string;
  kid?: string;
}

/** Signs requests as a known bot (Web Bot Auth, RFC 9421, tag "web-bot-auth") with its Ed25519 key. */
export class BotSigner {
  constructor(jwk: PrivateJwk | string, options?: BotSignerOptions);
  /** The signer of the private JWK in a file. */
  static fromFile(path: string, options?: BotSignerOptions): BotSigner;
  /** The key's JWK thumbprint (RFC 7638): its signatures' keyid. */
  readonly keyid: string;
  readonly whenAsked: boolean;
  /** Whether a request to `url` is signed now. */
  signs(url: string): boolean;
  /** Takes note of an answer's Accept-Signature: true when it newly asks this signer (whenAsked) to sign the origin. */
  asked(url: string, acceptSignature: string | null | undefined): boolean;
  /** The signature headers of one request to `url`. */
  headers(url: string, at?: { created?: number; expires?: number; nonce?: string; label?: string }): Record<string, string>;
}

/** Whether an Accept-Signature value asks for the Web Bot Auth signature this client makes. */
export function asksWebBotAuth(value: string | null | undefined): boolean;

/** Any fetch-compatible function: the global fetch, undici's, the one given to ky. */
export type FetchLike = (input: any, init?: any) => Promise<Response>;

/** The global fetch, paying pow-shield's challenges; options in `init.powShield`. */
export function powFetch(
  input: string | URL | Request,
  init?: RequestInit & { powShield?: PowShieldOptions },
): Promise<Response>;

/** Wraps a fetch-compatible function (the global fetch, undici's, ky's `fetch` option) so that it pays pow-shield's challenges. */
export function withPowShield<F extends FetchLike>(fetch: F, options?: PowShieldOptions): F;

/**
 * What withPowShieldAxios needs of an axios instance (axios 1.x, `axios.create()`), written out
 * here so that these types do not need axios: an AxiosInstance is one.
 */
export interface AxiosInstanceLike {
  request(config: any): Promise<any>;
  create(config?: any): any;
  interceptors: {
    request: {
      use(onFulfilled?: ((config: any) => any) | null, onRejected?: ((error: any) => any) | null, options?: any): number;
    };
  };
}

/**
 * Makes an axios instance pay pow-shield's challenges with withPowShield's options and behaviour
 * (a 429 paid, the next challenge paid ahead, `inFlight` per origin, `pace`); returns the same
 * instance. A block rejects with BlockedError (BannedError), whose `response` is the axios
 * response; other answers resolve or reject as the instance's validateStatus says.
 */
export function withPowShieldAxios<A extends AxiosInstanceLike>(instance: A, options?: PowShieldOptions): A;

/** Options of the solver alone. */
export interface SolveOptions {
  threads?: number;
  maxSolveTimeMs?: number | null;
  maxDifficulty?: number;
  signal?: AbortSignal;
}

/**
 * A nonce (decimal digits) whose SHA-256(salt + nonce) has `difficulty` leading
 * hex zeros, or `{ bits }` leading zero bits. Rejects with the signal's reason when aborted.
 */
export function solve(
  salt: string,
  difficulty: number | { difficulty?: number; bits?: number },
  options?: SolveOptions,
): Promise<string>;

/** Whether `nonce` solves `salt` for `bits` leading zero bits. */
export function isSolution(salt: string, nonce: string, bits: number): boolean;

/** Hashes per second of the solver on `threads` threads over about `ms` milliseconds. */
export function hashRate(options?: { threads?: number; ms?: number }): Promise<number>;

/**
 * The search the solver runs: the native addon where one is built for this platform (the package
 * carries linux-x64 glibc's; `make node-native` builds one), else the WebAssembly SIMD one, else
 * node:crypto's (POW_SHIELD_SOLVER=wasm or js forces one).
 */
export function engineName(): 'native' | 'wasm' | 'js';

/**
 * Pays an Equi-X challenge (`pow_shield_work equix`): the nonce and the
 * solution (base64url) for X-PoW-Nonce and X-PoW-Solution. Rejects at once
 * with an UnsolvableError naming the algorithm where neither the native
 * addon nor lib/equix.wasm runs.
 */
export function solveEquix(
  salt: string,
  bits: number,
  options?: SolveOptions,
): Promise<{ nonce: string; solution: string }>;

/** How Equi-X runs here (bytes of memory per solving thread), or null where it cannot. */
export function equixInfo(): { engine: 'native' | 'wasm'; runtime: 'compiled' | 'interpreted'; memory: number } | null;

/** One search's rate on this thread (it blocks it for about `ms`): what bench.js prints. */
export function searchRate(options?: { engine?: 'native' | 'wasm' | 'js'; ms?: number }): {
  engine: 'native' | 'wasm' | 'js';
  hashes: number;
  perCpuSecond: number;
  perSecond: number;
};

/** A challenge read from a response. */
export interface Challenge {
  status: number;
  token: string;
  salt: string;
  /** Leading zero bits the solution must have. */
  bits: number;
  /** ceil(bits / 4): leading hex zeros. */
  difficulty: number;
  /** What pays it: a nonce (sha256), or a nonce and an Equi-X solution (equix). */
  algorithm: 'sha256' | 'equix';
  retryAfterMs: number | null;
}

/** The challenge of a response (429, 409, 410, 422), or null for one that is not the shield's. */
export function readChallenge(response: Response): Promise<Challenge | null>;

export const DEFAULT_MAX_RETRIES: number;
export const DEFAULT_MAX_WAIT_MS: number;
export const DEFAULT_MAX_SOLVE_TIME_MS: number;
export const MAX_DIFFICULTY: number;

/**
 * Base of every error; `response` is the answer it is about: a fetch Response, or with
 * withPowShieldAxios the axios response (`PowShieldError<AxiosResponse>`).
 */
export class PowShieldError<R = Response> extends Error {
  response?: R;
}
/** X-PoW-Shield: blocked: wait, paying does not help. */
export class BlockedError<R = Response> extends PowShieldError<R> {}
/** X-PoW-Shield: banned. */
export class BannedError<R = Response> extends BlockedError<R> {}
/** A challenge that will not be solved. */
export class UnsolvableError<R = Response> extends PowShieldError<R> {}
/** Harder than maxDifficulty. */
export class TooDifficultError<R = Response> extends UnsolvableError<R> {
  difficulty?: number;
  maxDifficulty?: number;
}
/** No solution within maxSolveTimeMs. */
export class SolveTimeoutError<R = Response> extends UnsolvableError<R> {}
/** A challenge that cannot be read or sent back. */
export class BadChallengeError<R = Response> extends UnsolvableError<R> {}
/** Still challenged after maxRetries resends. */
export class RetriesExhaustedError<R = Response> extends PowShieldError<R> {}

declare const _default: {
  powFetch: typeof powFetch;
  withPowShield: typeof withPowShield;
  withPowShieldAxios: typeof withPowShieldAxios;
  solve: typeof solve;
  BotSigner: typeof BotSigner;
};
export default _default;
