'use strict';
// pow-shield for Node.js: powFetch / withPowShield (and withPowShieldAxios
// for an axios instance) pay an API's proof-of-work challenges; solve is the
// solver alone. No dependencies.
const {
  PowShieldError, BlockedError, BannedError, UnsolvableError, TooDifficultError,
  SolveTimeoutError, BadChallengeError, RetriesExhaustedError,
} = require('./errors');
const { readChallenge } = require('./challenge');
const {
  solve, solveEquix, hashRate, searchRate, engineName, DEFAULT_MAX_SOLVE_TIME_MS, MAX_DIFFICULTY,
} = require('./solver');
const { equixInfo } = require('./equix');
const { powFetch, withPowShield, DEFAULT_MAX_RETRIES, DEFAULT_MAX_WAIT_MS } = require('./fetch');
const { withPowShieldAxios } = require('./axios');
const { isSolution } = require('./work');
const { BotSigner, asksWebBotAuth } = require('./bots');

// Shorthand names only: Node's ES module loader reads them from this line.
module.exports = {
  powFetch, withPowShield, withPowShieldAxios, solve, solveEquix, equixInfo, hashRate, searchRate, engineName,
  isSolution, readChallenge, BotSigner, asksWebBotAuth,
  DEFAULT_MAX_RETRIES, DEFAULT_MAX_WAIT_MS, DEFAULT_MAX_SOLVE_TIME_MS, MAX_DIFFICULTY,
  PowShieldError, BlockedError, BannedError, UnsolvableError, TooDifficultError,
  SolveTimeoutError, BadChallengeError, RetriesExhaustedError,
};
