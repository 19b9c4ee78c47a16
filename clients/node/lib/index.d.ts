/**
 * cvsm: the Node client for the cvsm secrets manager (hand-kept types for lib/index.js).
 */

/** VERSION is the version of this package, also sent in the user agent `cvsm-node/<VERSION>`. */
export declare const VERSION: string;

/** ClientOptions configures a Client; each option falls back to its CVSM_* variable. */
export interface ClientOptions {
  /** token is the API token (`cvsm_...`) or JWT; falls back to CVSM_TOKEN. Required. */
  token?: string;
  /** baseUrl is the API root including `/api/v1`; falls back to CVSM_BASE_URL. Required. */
  baseUrl?: string;
  /** team is a team id (UUID) or slug; falls back to CVSM_TEAM. Required. */
  team?: string;
  /** environment is read from; falls back to CVSM_ENVIRONMENT, then `production`. */
  environment?: string;
  /** cacheTtl is how long values are cached, in whole seconds; CVSM_CACHE_TTL, then 30; 0 disables. */
  cacheTtl?: number;
  /** timeout is the limit for each HTTP attempt, in seconds; default 10. */
  timeout?: number;
  /** maxRetries is how many more attempts a GET gets after a network error or 502/503/504; default 2. */
  maxRetries?: number;
}

/** ClientConfig is the effective configuration of a Client, never including the token. */
export interface ClientConfig {
  baseUrl: string;
  team: string;
  environment: string;
  cacheTtl: number;
  timeout: number;
  maxRetries: number;
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
  /** get returns the value of the secret `name` (case-sensitive), cached for cacheTtl seconds. */
  get(name: string): Promise<string>;
  /** getAll returns every secret of the environment as name -> value; it also fills get's cache. */
  getAll(): Promise<Record<string, string>>;
  /** inject copies getAll() into process.env, keeping set variables unless overwrite; returns the names set, sorted. */
  inject(options?: InjectOptions): Promise<string[]>;
  /** clearCache forgets every cached value. */
  clearCache(): void;
  /** toJSON returns the effective configuration without the token. */
  toJSON(): ClientConfig;
}

/** ErrorOptions are the extra fields of an error. */
export interface CvsmErrorOptions {
  status?: number | null;
  cause?: unknown;
}

/** CvsmError is the base class of every error the client throws. */
export declare class CvsmError extends Error {
  constructor(message: string, options?: CvsmErrorOptions);
  /** status is the HTTP status that caused the error, or null when there was no response. */
  status: number | null;
}
/** ConfigurationError: missing or invalid configuration, or a team slug that matches no team. */
export declare class ConfigurationError extends CvsmError {}
/** AuthenticationError: HTTP 401; the cache is emptied. */
export declare class AuthenticationError extends CvsmError {}
/** PermissionDeniedError: HTTP 403. */
export declare class PermissionDeniedError extends CvsmError {}
/** SecretNotFoundError: the name is absent in the environment (status null), or HTTP 404. */
export declare class SecretNotFoundError extends CvsmError {}
/** RateLimitError: HTTP 429. */
export declare class RateLimitError extends CvsmError {
  constructor(message: string, options?: CvsmErrorOptions & { retryAfter?: number | null });
  /** retryAfter is the number of whole seconds the server asked to wait, or null. */
  retryAfter: number | null;
}
/** ApiError: any other non-2xx status, including a 5xx after the retries. */
export declare class ApiError extends CvsmError {}
/** NetworkError: connection refused or dropped, timeout or unreadable response, after the retries. */
export declare class NetworkError extends CvsmError {}
