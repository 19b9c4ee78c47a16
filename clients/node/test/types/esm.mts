// An ES module program that uses every public item of the package, as its types describe them.
import cvsm, {
  ApiError,
  AuthenticationError,
  Client,
  ConfigurationError,
  CvsmError,
  DecryptionError,
  NetworkError,
  PermissionDeniedError,
  RateLimitError,
  SecretNotFoundError,
  VERSION,
  type ClientConfig,
  type ClientOptions,
  type FetchFunction,
  type StaleEvent,
} from 'cvsm';

const fetchThrough: FetchFunction = async (url, init) => {
  const answer = await fetch(url, { method: init.method, headers: init.headers, redirect: init.redirect, signal: init.signal });
  return answer;
};

const options: ClientOptions = {
  token: 'cvsm_x',
  baseUrl: 'https://cvsm.example.com/api/v1',
  team: process.env.CVSM_TEAM,
  environment: 'staging',
  cacheTtl: 30,
  timeout: 10,
  maxRetries: 2,
  staleIfError: 300,
  onStale: (event: StaleEvent) => {
    const where: string = `${event.method} ${event.name ?? '*'} ${event.environment} ${event.age}s`;
    const status: number | null = event.error.status;
    console.warn(where, status);
  },
  fetch: fetchThrough,
};

export async function main(): Promise<number> {
  const client = new Client(options);
  const config: ClientConfig = client.toJSON();
  const ca: string | null = client.caFile ?? config.caFile;
  const settings: [string, string, string, number, number, number, number] = [
    client.baseUrl, client.team, client.environment, client.cacheTtl, client.timeout, client.maxRetries, client.staleIfError,
  ];
  try {
    const value: string = await client.get('DATABASE_URL');
    const all: Record<string, string> = await client.getAll();
    const names: string[] = await client.inject({ overwrite: true });
    client.clearCache();
    return value.length + Object.keys(all).length + names.length + settings.length + (ca ? 1 : 0);
  } catch (error) {
    if (error instanceof SecretNotFoundError) return error.suggestion?.length ?? 0;
    if (error instanceof DecryptionError) return error.status === null ? -1 : error.status;
    if (error instanceof RateLimitError) return error.retryAfter ?? 0;
    if (error instanceof AuthenticationError || error instanceof PermissionDeniedError) return 401;
    if (error instanceof ConfigurationError || error instanceof ApiError || error instanceof NetworkError) {
      return error.status ?? 0;
    }
    if (error instanceof CvsmError) {
      const id: string | null = error.requestId;
      return id === null ? 1 : 2;
    }
    throw error;
  }
}

export const version: string = VERSION;
export const sameClass: boolean = cvsm.Client === Client;
export const built: CvsmError = new RateLimitError('slow down', { retryAfter: 3, requestId: null });
export const unopened: CvsmError = new DecryptionError('secret "API_KEY" in production cannot be opened', { requestId: 'req-1' });
export const sameError: boolean = cvsm.DecryptionError === DecryptionError;
