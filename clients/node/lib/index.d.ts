/**
 * cvsm: the Node client for the cvsm secrets manager (hand-kept types for lib/index.js).
 */

/** VERSION is the version of this package, also sent in the user agent `cvsm-node/<VERSION>`. */
export declare const VERSION: string;

/** FetchInit is what the client passes to a fetch function. */
export interface FetchInit {
  method: 'GET';
  headers: Record<string, string>;
  redirect: 'manual';
  signal: AbortSignal;
}

/** FetchAnswer is what the client reads of a fetch answer (a Response has all of it). */
export interface FetchAnswer {
  status: number;
  statusText?: string;
  headers: { get(name: string): string | null };
  text(): Promise<string>;
}

/** FetchFunction is the transport seam: the global fetch, undici's, or any with its signature. */
export type FetchFunction = (url: string, init: FetchInit) => Promise<FetchAnswer>;

/**
 * ClientOptions configures a Client; each option falls back to its CVSM_* variable, read when
 * the client is created, as are the proxy variables (http_proxy, https_proxy, no_proxy).
 */
export interface ClientOptions {
  /** token is the API token (`cvsm_...`) or JWT, trimmed of whitespace; falls back to CVSM_TOKEN. Required. */
  token?: string;
  /** baseUrl is the API root including `/api/v1`; falls back to CVSM_BASE_URL. Required. */
  baseUrl?: string;
  /** team is a team id (UUID) or slug; falls back to CVSM_TEAM. Required. */
  team?: string;
  /** environment is read from; falls back to CVSM_ENVIRONMENT, then `production`. */
  environment?: string;
  /** cacheTtl is how long values are cached, in whole seconds; CVSM_CACHE_TTL, then 30; 0 disables. */
  cacheTtl?: number;
  /** timeout is the limit for each whole HTTP attempt, body included, in seconds; CVSM_TIMEOUT, then 10. */
  timeout?: number;
  /** maxRetries is how many more attempts a GET gets after a network error or 502/503/504; CVSM_MAX_RETRIES, then 2. */
  maxRetries?: number;
  /** caFile is the path of a PEM bundle trusted instead of the system store; falls back to CVSM_CA_FILE. */
  caFile?: string;
  /** fetch replaces the built-in transport (no proxy variables, no caFile with it). */
  fetch?: FetchFunction;
}

/** ClientConfig is the effective configuration of a Client, never including the token. */
export interface ClientConfig {
  baseUrl: string;
  team: string;
  environment: string;
  cacheTtl: number;
  timeout: number;
  maxRetries: number;
  caFile: string | null;
}

/** InjectOptions controls Client.inject. */
export interface InjectOptions {
  /** overwrite replaces variables that are already set in process.env; default false. */
  overwrite?: boolean;
}

/** Client reads secrets of one team and environment from a cvsm server. */
export declare class Client {
  /**
   * Client builds a client from options and CVSM_* variables.
   * @throws {ConfigurationError} when the token, base URL or team is missing, or an option is invalid.
   */
  constructor(options?: ClientOptions);
  /** baseUrl is the API root the client calls, without a trailing slash. */
  readonly baseUrl: string;
  /** team is the team id or slug as configured. */
  readonly team: string;
  /** environment is the environment the client reads from. */
  readonly environment: string;
  /** cacheTtl is how many seconds a fetched value is reused; 0 means no cache. */
  readonly cacheTtl: number;
  /** timeout is the limit in seconds for each HTTP attempt. */
  readonly timeout: number;
  /** maxRetries is how many more attempts a GET gets after a network error or 502/503/504. */
  readonly maxRetries: number;
  /** caFile is the path of the PEM bundle trusted instead of the system store, or null. */
  readonly caFile: string | null;
  /**
   * get returns the value of the secret `name` (case-sensitive), cached for cacheTtl seconds.
   * @throws {SecretNotFoundError} when the name is not valid (no request) or absent.
   */
  get(name: string): Promise<string>;
  /** getAll returns every secret of the environment as name -> value; it also fills get's cache. */
  getAll(): Promise<Record<string, string>>;
  /**
   * inject copies getAll() into process.env, keeping set variables unless overwrite; returns the
   * names set, sorted.
   * @throws {ConfigurationError} when a name or value cannot be put in the environment; nothing is set then.
   */
  inject(options?: InjectOptions): Promise<string[]>;
  /** clearCache forgets every cached value. */
  clearCache(): void;
  /** toJSON returns the effective configuration without the token. */
  toJSON(): ClientConfig;
}

/** ErrorOptions are the extra fields of an error. */
export interface CvsmErrorOptions {
  status?: number | null;
  requestId?: string | null;
  suggestion?: string | null;
  cause?: unknown;
}

/** CvsmError is the base class of every error the client throws. */
export declare class CvsmError extends Error {
  constructor(message: string, options?: CvsmErrorOptions);
  /** status is the HTTP status that caused the error, or null when there was no response. */
  status: number | null;
  /** requestId is the X-Request-Id of the answer the error came from, or null. */
  requestId: string | null;
  /** suggestion is, on SecretNotFoundError, the name that differs only in case, else null. */
  suggestion: string | null;
}
/**
 * ConfigurationError: missing or invalid configuration, a team slug that matches no team, a
 * 404/400 that says the base URL, team or environment is wrong, or a secret inject cannot set.
 */
export declare class ConfigurationError extends CvsmError {}
/** AuthenticationError: HTTP 401; the cache is emptied. */
export declare class AuthenticationError extends CvsmError {}
/** PermissionDeniedError: HTTP 403. */
export declare class PermissionDeniedError extends CvsmError {}
/** SecretNotFoundError: the name is invalid or absent in the environment (status null), or HTTP 404 on the value. */
export declare class SecretNotFoundError extends CvsmError {}
/** RateLimitError: HTTP 429. */
export declare class RateLimitError extends CvsmError {
  constructor(message: string, options?: CvsmErrorOptions & { retryAfter?: number | null });
  /** retryAfter is the number of whole seconds the server asked to wait, or null. */
  retryAfter: number | null;
}
/** ApiError: any other non-2xx status, including a 5xx after the retries and a 3xx (never followed). */
export declare class ApiError extends CvsmError {}
/** NetworkError: connection refused or dropped, TLS failure, timeout or unreadable answer, after the retries. */
export declare class NetworkError extends CvsmError {}
