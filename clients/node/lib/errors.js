'use strict';
// The errors of a paying client; each carries the `response` it is about
// (undefined for a solve started without one).

class PowShieldError extends Error {
  constructor(message, response) {
    super(message);
    this.name = new.target.name;
    this.response = response;
  }
}

/** The circuit breaker refuses this client for now (`X-PoW-Shield: blocked`): wait, paying does not help. */
class BlockedError extends PowShieldError {}

/** Banned (`X-PoW-Shield: banned`). */
class BannedError extends BlockedError {}

/** A challenge that will not be solved; nothing was sent after it. */
class UnsolvableError extends PowShieldError {}

/** Harder than `maxDifficulty`, checked before any work. */
class TooDifficultError extends UnsolvableError {
  constructor(message, response, { difficulty, maxDifficulty } = {}) {
    super(message, response);
    this.difficulty = difficulty;
    this.maxDifficulty = maxDifficulty;
  }
}

/** No solution within `maxSolveTimeMs`. */
class SolveTimeoutError extends UnsolvableError {}

/** A challenge that cannot be read or sent back (refused before any work). */
class BadChallengeError extends UnsolvableError {}

/** Still challenged after `maxRetries` resends. */
class RetriesExhaustedError extends PowShieldError {}

module.exports = {
  PowShieldError,
  BlockedError,
  BannedError,
  UnsolvableError,
  TooDifficultError,
  SolveTimeoutError,
  BadChallengeError,
  RetriesExhaustedError,
};
