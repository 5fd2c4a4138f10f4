'use strict';
// pow-shield for Node.js: powFetch / withPowShield pay an API's
// proof-of-work challenges; solve is the solver alone. No dependencies.
const errors = require('./errors');
const challenge = require('./challenge');
const solver = require('./solver');
const fetch = require('./fetch');
const { isSolution } = require('./work');

module.exports = {
  powFetch: fetch.powFetch,
  withPowShield: fetch.withPowShield,
  solve: solver.solve,
  hashRate: solver.hashRate,
  isSolution,
  readChallenge: challenge.readChallenge,
  DEFAULT_MAX_RETRIES: fetch.DEFAULT_MAX_RETRIES,
  DEFAULT_MAX_WAIT_MS: fetch.DEFAULT_MAX_WAIT_MS,
  DEFAULT_MAX_SOLVE_TIME_MS: solver.DEFAULT_MAX_SOLVE_TIME_MS,
  MAX_DIFFICULTY: solver.MAX_DIFFICULTY,
  PowShieldError: errors.PowShieldError,
  BlockedError: errors.BlockedError,
  BannedError: errors.BannedError,
  UnsolvableError: errors.UnsolvableError,
  TooDifficultError: errors.TooDifficultError,
  SolveTimeoutError: errors.SolveTimeoutError,
  BadChallengeError: errors.BadChallengeError,
  RetriesExhaustedError: errors.RetriesExhaustedError,
};
