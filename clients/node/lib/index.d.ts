/**
 * Types of `cvsm`, the Node client of the cvsm team secrets manager (CommonJS entry,
 * `lib/index.js`). Kept by hand; `test/types/` compiles a consumer against them.
 * @packageDocumentation
 */

/** The version of this package; requests carry it in the user agent `cvsm-node/<VERSION>`. */
export declare const VERSION: string;

/** The request a {@link FetchFunction} is called with. */
export interface FetchInit {
  /** Always `GET`: the client only reads. */
  method: 'GET';
  /** The request headers: authorization, accept, user agent and request id. */
  headers: Record<string, string>;
  /** Always `manual`: a redirect is an {@link ApiError}, never followed. */
  redirect: 'manual';
  /** Aborted when the attempt's timeout passes; the function should then reject. */
  signal: AbortSignal;
}

/** The part of a fetch answer the client reads; a `Response` has all of it. */
export interface FetchAnswer {
  /** The HTTP status code. */
  status: number;
  /** The reason phrase, used in error messages when the body has none. */
  statusText?: string;
  /** The response headers (`Retry-After`, `X-Request-Id`, `Content-Type` are read). */
  headers: { get(name: string): string | null };
  /** Resolves to the whole body; it must reject if the signal aborts while the body is read. */
  text(): Promise<string>;
  /** The body as a stream of bytes: read by a live client's change stream only (a `Response` has it). */
  body?: ReadableStream<Uint8Array> | null;
}

/**
 * The transport seam: the global `fetch`, undici's, or any function with this signature.
 * @param url - The absolute URL of the request.
 * @param init - The method, headers, redirect policy and abort signal.
 * @returns The answer, whatever its status.
 */
export type FetchFunction = (url: string, init: FetchInit) => Promise<FetchAnswer>;

/**
 * Describes a read answered by a kept value after a failed refresh (stale if error, rule R14).
 * It never holds the value.
 */
export interface StaleEvent {
  /** The call that was answered: `get` or `getAll`. */
  readonly method: 'get' | 'getAll';
  /** The secret `get()` was asked for; `null` for `getAll()`. */
  readonly name: string | null;
  /** The environment the value belongs to. */
  readonly environment: string;
  /** What the refresh failed with: a {@link NetworkError}, an {@link ApiError} with a 5xx, or a {@link RateLimitError}. */
  readonly error: NetworkError | ApiError | RateLimitError;
  /** How many seconds ago the served value was fetched. */
  readonly age: number;
}

/**
 * Options of a {@link Client}. Each falls back to its `CVSM_*` variable, read when the client
 * is created, as are the proxy variables (`http_proxy`, `https_proxy`, `no_proxy`).
 */
export interface ClientOptions {
  /**
   * The API token (`cvsm_...`) or JWT, trimmed of whitespace; defaults to `CVSM_TOKEN`. Required.
   * An end-to-end team's token carries its key part and pin
   * (`cvsm_<64 hex>.<private key>.<key version>.<commitment>`): only the part before the first
   * dot is sent, and the key opens the values on this side once the team key is checked against
   * the pin. A token of the first format (no pin) is a ConfigurationError.
   */
  token?: string;
  /** The API root including `/api/v1`; defaults to `CVSM_BASE_URL`. Required. */
  baseUrl?: string;
  /** A team id (UUID) or slug; defaults to `CVSM_TEAM`. Required. */
  team?: string;
  /** The environment to read; defaults to `CVSM_ENVIRONMENT`, then `production`. */
  environment?: string;
  /** How long values are cached, in whole seconds; defaults to `CVSM_CACHE_TTL`, then 30. 0 disables the cache. */
  cacheTtl?: number;
  /** The limit for each whole HTTP attempt, body included, in seconds; defaults to `CVSM_TIMEOUT`, then 10. */
  timeout?: number;
  /** How many more attempts a GET gets after a network error or a 502/503/504; defaults to `CVSM_MAX_RETRIES`, then 2. */
  maxRetries?: number;
  /**
   * How many whole seconds a value is kept after it stops being fresh, to answer a refresh that
   * fails with a network error, a 5xx or a 429; defaults to `CVSM_STALE_IF_ERROR`, then 0 (off).
   */
  staleIfError?: number;
  /**
   * Called, before the call resolves, each time a kept value answers a failed refresh; an
   * exception it throws rejects the call. A process warning (`CvsmStaleWarning`) is also
   * emitted once per name.
   */
  onStale?: (event: StaleEvent) => void;
  /** The path of a PEM bundle trusted instead of the system store; defaults to `CVSM_CA_FILE`. */
  caFile?: string;
  /** Replaces the built-in transport (no proxy variables, no `caFile` with it). */
  fetch?: FetchFunction;
  /**
   * Keep one change-stream connection, opened at the first read, so that a secret changed on
   * the server stops being served from the cache as soon as the change is announced (within a
   * second); an unchanged value still costs one request per `cacheTtl`. While the stream is down
   * the cache works as without it. Defaults to `CVSM_LIVE` (`1`/`true`/`yes`/`on`,
   * `0`/`false`/`no`/`off`), then `false`. {@link Client.close} ends the stream.
   */
  live?: boolean;
}

/** Options of {@link Client.refresh}. */
export interface RefreshOptions {
  /** Another environment to read (its value is returned, not cached); default the client's. */
  environment?: string;
}

/** The effective configuration of a {@link Client}; never the token. */
export interface ClientConfig {
  /** The API root, without a trailing slash. */
  baseUrl: string;
  /** The team id or slug as configured. */
  team: string;
  /** The environment read. */
  environment: string;
  /** Seconds a fetched value is reused; 0 means no cache. */
  cacheTtl: number;
  /** Seconds each HTTP attempt may take. */
  timeout: number;
  /** Extra attempts after a network error or a 502/503/504. */
  maxRetries: number;
  /** Seconds a value is kept past `cacheTtl` to answer a failed refresh; 0 is off. */
  staleIfError: number;
  /** Whether the client keeps a change stream (`live`). */
  live: boolean;
  /** The PEM bundle trusted instead of the system store, or `null`. */
  caFile: string | null;
}

/** Options of {@link Client.inject}. */
export interface InjectOptions {
  /** Replace variables already set in `process.env`; default `false`. */
  overwrite?: boolean;
}

/**
 * Reads the secrets of one team and environment from a cvsm server, with a short-lived cache,
 * retries and typed errors.
 * @example
 * ```js
 * const cvsm = new Client({ team: process.env.CVSM_TEAM });
 * const databaseUrl = await cvsm.get('DATABASE_URL');
 * ```
 */
export declare class Client {
  /**
   * Creates a client from `options` and the `CVSM_*` variables. Sends no request.
   * @param options - Overrides of the `CVSM_*` variables, and the hooks only options can give.
   * @throws {@link ConfigurationError} When the token, base URL or team is missing, or an option is invalid.
   */
  constructor(options?: ClientOptions);
  /** The API root the client calls, without a trailing slash. */
  readonly baseUrl: string;
  /** The team id or slug as configured; it goes into every path as it is (percent-encoded). */
  readonly team: string;
  /** The environment the client reads. */
  readonly environment: string;
  /** How many seconds a fetched value is reused; 0 means no cache. */
  readonly cacheTtl: number;
  /** The limit in seconds for each HTTP attempt. */
  readonly timeout: number;
  /** How many more attempts a GET gets after a network error or a 502/503/504. */
  readonly maxRetries: number;
  /** How many seconds a value is kept after it stops being fresh, to answer a failed refresh; 0 is off. */
  readonly staleIfError: number;
  /** Whether the client keeps a change stream (option `live`, `CVSM_LIVE`). */
  readonly live: boolean;
  /** Whether a live client's change stream is up now; always `false` without `live`. */
  readonly liveConnected: boolean;
  /** The path of the PEM bundle trusted instead of the system store, or `null`. */
  readonly caFile: string | null;
  /**
   * Reads one secret with one request, cached for `cacheTtl` seconds; with `staleIfError`, a
   * kept value answers a failed refresh (see `onStale`). An end-to-end team's first read also
   * fetches the team key, and the value is opened on this side.
   * @param name - The secret's name (case-sensitive).
   * @returns The secret's value.
   * @throws {@link SecretNotFoundError} When the name is not valid (no request) or absent.
   * @throws {@link DecryptionError} When an end-to-end team's value does not open.
   * @throws {@link ConfigurationError} When the team is end-to-end and the token lacks its key part.
   * @throws {@link CvsmError} Any other subclass, for the failure it names.
   */
  get(name: string): Promise<string>;
  /**
   * Reads every secret of the environment with one request to the export; fills `get`'s cache
   * too. With `staleIfError`, a kept export answers a failed refresh (see `onStale`). An
   * end-to-end team's values are opened on this side, as by `get`.
   * @returns The secrets, name to value.
   * @throws {@link DecryptionError} When an end-to-end team's value does not open.
   * @throws {@link ConfigurationError} When the team is end-to-end and the token lacks its key part.
   * @throws {@link CvsmError} A subclass, for the failure it names.
   */
  getAll(): Promise<Record<string, string>>;
  /**
   * Reads one secret from the server now, past the cache (one request, as `get` makes): for
   * "my database login failed: fetch the credential again once". No kept value answers in its
   * place (`staleIfError` does not apply). In the client's environment the cache then holds the
   * value; another environment's value is returned, not cached.
   * @param name - The secret's name (case-sensitive).
   * @param options - `environment`: another environment to read.
   * @returns The secret's current value.
   * @throws {@link SecretNotFoundError} When the name is not valid (no request) or absent.
   * @throws {@link CvsmError} Any other subclass, as `get`.
   */
  refresh(name: string, options?: RefreshOptions): Promise<string>;
  /**
   * Ends a live client's change stream and resolves once it has stopped; the client still
   * reads afterwards, without `live`. Without `live` it does nothing.
   */
  close(): Promise<void>;
  /**
   * Copies {@link Client.getAll} into `process.env`, keeping variables already set unless
   * `overwrite`.
   * @param options - `overwrite: true` replaces variables already set.
   * @returns The names set, sorted.
   * @throws {@link ConfigurationError} When a name or value cannot be put in the environment; nothing is set then.
   *   As {@link Client.getAll}, when the team is end-to-end and the token lacks its key part.
   */
  inject(options?: InjectOptions): Promise<string[]>;
  /** Forgets every cached value, the kept ones included, and an end-to-end team's key. */
  clearCache(): void;
  /**
   * Returns the effective configuration, without the token (what `JSON.stringify` prints), the
   * base URL with any user and password shown as `***` (`baseUrl` itself keeps them).
   * @returns A new object each call.
   */
  toJSON(): ClientConfig;
}

/** The extra fields an error can be built with. */
export interface CvsmErrorOptions {
  /** The HTTP status behind the error, or `null` when there was no answer. */
  status?: number | null;
  /** The `X-Request-Id` of the answer, or `null`. */
  requestId?: string | null;
  /** The name that differs only in case from the one asked for, or `null`. */
  suggestion?: string | null;
  /** The error that caused this one. */
  cause?: unknown;
}

/** The base class of every error the client throws; branch on its subclasses. */
export declare class CvsmError extends Error {
  /**
   * @param message - What went wrong; never a token or a secret value.
   * @param options - The status, request id, suggestion and cause.
   */
  constructor(message: string, options?: CvsmErrorOptions);
  /** The HTTP status that caused the error, or `null` when there was no answer. */
  status: number | null;
  /** The `X-Request-Id` of the answer the error came from, or `null`. */
  requestId: string | null;
  /** On a {@link SecretNotFoundError}, the name that differs only in case; else `null`. */
  suggestion: string | null;
}
/**
 * Missing or invalid configuration, a 404 or 400 that says the base URL, team or environment is
 * wrong, or a secret `inject` cannot set.
 */
export declare class ConfigurationError extends CvsmError {}
/** HTTP 401: the token is not accepted; the cache is emptied. */
export declare class AuthenticationError extends CvsmError {}
/** HTTP 403: the token may not read this; the cache is emptied. */
export declare class PermissionDeniedError extends CvsmError {}
/** The name is invalid (`status` `null`, no request) or absent from the environment (`status` 404). */
export declare class SecretNotFoundError extends CvsmError {}
/** HTTP 429: too many requests. */
export declare class RateLimitError extends CvsmError {
  /**
   * @param message - What went wrong.
   * @param options - As for {@link CvsmError}, plus `retryAfter`.
   */
  constructor(message: string, options?: CvsmErrorOptions & { retryAfter?: number | null });
  /** The whole seconds the server asked to wait, or `null`. */
  retryAfter: number | null;
}
/** Any other non-2xx status, a 5xx after the retries included, and a 3xx (never followed). */
export declare class ApiError extends CvsmError {}
/** Connection refused or dropped, a TLS failure, a timeout or an unreadable answer, after the retries. */
export declare class NetworkError extends CvsmError {}
/**
 * A value of an end-to-end team does not open with the token's key: a malformed or tampered
 * envelope, one sealed for another secret or environment, one under a key version the team key
 * answered is not, a team key wrap that does not open, or a team key that does not chain back to
 * the token's pin (docs/e2e.md, format 2). Never retried; `status` is `null`; the
 * message names the secret, never a value or a key.
 */
export declare class DecryptionError extends CvsmError {}
