// Compiled (not run) by types.test.js where axios is installed: withPowShieldAxios takes an
// AxiosInstance and gives one back, and its errors carry the axios response.
import axios, { AxiosInstance, AxiosResponse } from 'axios';
import { withPowShieldAxios, BlockedError, PowShieldError } from '../index';

async function main(): Promise<number> {
  const api: AxiosInstance = withPowShieldAxios(axios.create({ baseURL: 'http://127.0.0.1:8080' }), { maxDifficulty: 6, pace: false });
  try {
    const r = await api.get<{ items: number[] }>('/api/items');
    return r.data.items.length;
  } catch (e) {
    if (e instanceof BlockedError) return (e as BlockedError<AxiosResponse>).response?.status ?? 0;
    if (e instanceof PowShieldError) return -1;
    throw e;
  }
}

export { main };
