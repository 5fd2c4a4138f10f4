// Compiled (not run) by types.test.js: the shipped index.d.ts describes the API.
import {
  powFetch, withPowShield, solve, readChallenge, BlockedError, TooDifficultError,
  SolveTimeoutError, PowShieldError, DEFAULT_MAX_RETRIES, Challenge, engineName, searchRate,
  BotSigner, asksWebBotAuth,
} from '../index';

async function main(signal: AbortSignal): Promise<number> {
  const r: Response = await powFetch('http://127.0.0.1:8080/api/items', {
    method: 'POST', body: '{}', signal, powShield: { maxDifficulty: 6, maxSolveTimeMs: 10_000, preferWait: 2000 },
  });
  const f = withPowShield(fetch, { maxRetries: DEFAULT_MAX_RETRIES, threads: 2, payAhead: true, pace: true });
  const paced = await powFetch('http://127.0.0.1:8080/api/items', { powShield: { pace: true, maxWaitMs: 5000, payAhead: false } });
  const engine: 'native' | 'wasm' | 'js' = engineName();
  const rate: number = searchRate({ engine, ms: 100 }).perCpuSecond + paced.status;
  const again: Response = await f(new URL('http://127.0.0.1:8080/api/items'));
  const bot = BotSigner.fromFile('mybot.jwk', { signatureAgent: 'https://mybot.example/keys', whenAsked: true });
  const signed = withPowShield(fetch, { bot });
  const headers: Record<string, string> = new BotSigner({ kty: 'OKP', crv: 'Ed25519', d: 'x' }).headers('https://a/');
  const asks: boolean = asksWebBotAuth(again.headers.get('Accept-Signature')) && bot.signs('https://a/') && !!headers;
  if (asks) await signed('http://127.0.0.1:8080/api/items');
  const nonce: string = await solve('00112233445566778899aabbccddeeff', { bits: 18 }, { signal });
  const c: Challenge | null = await readChallenge(again);
  try {
    await f('http://127.0.0.1:8080/');
  } catch (e) {
    if (e instanceof TooDifficultError) return e.difficulty ?? 0;
    if (e instanceof BlockedError || e instanceof SolveTimeoutError) return (e as PowShieldError).response?.status ?? 0;
  }
  return r.status + nonce.length + (c ? c.bits : 0) + rate;
}

export { main };
