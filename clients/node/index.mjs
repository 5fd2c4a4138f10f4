// ES module entry: the same objects as require('pow-shield').
import cjs from './lib/index.js';

export const {
  powFetch,
  withPowShield,
  solve,
  hashRate,
  isSolution,
  readChallenge,
  DEFAULT_MAX_RETRIES,
  DEFAULT_MAX_WAIT_MS,
  DEFAULT_MAX_SOLVE_TIME_MS,
  MAX_DIFFICULTY,
  PowShieldError,
  BlockedError,
  BannedError,
  UnsolvableError,
  TooDifficultError,
  SolveTimeoutError,
  BadChallengeError,
  RetriesExhaustedError,
} = cjs;
export default cjs;
