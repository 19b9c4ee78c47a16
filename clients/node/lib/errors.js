'use strict';
/**
 * errors: every error the cvsm client throws. All of them extend CvsmError, so a caller can
 * catch one base class or branch on the subclass; none of them ever holds a token or a value.
 */

/**
 * The base class of every error the client throws. Its fields:
 * - `status`: the HTTP status of the answer that caused it, or null without one (configuration
 *   checks, an invalid secret name, network errors, unreadable answers);
 * - `requestId`: the `X-Request-Id` header of the answer it came from (for an absent name, the
 *   by-name read's), or null without an answer or header;
 * - `suggestion`: on SecretNotFoundError, the existing name that differs only in case, else null.
 */
class CvsmError extends Error {
  /**
   * @param {string} message What went wrong; never a token or a secret value.
   * @param {{ status?: number | null, requestId?: string | null, suggestion?: string | null, cause?: unknown }} [options]
   *   The HTTP status, the answer's request id, the suggested name and the cause.
   */
  constructor(message, { status = null, requestId = null, suggestion = null, cause } = {}) {
    super(message, cause === undefined ? undefined : { cause });
    this.status = status;
    this.requestId = requestId;
    this.suggestion = suggestion;
  }
}

/**
 * The client cannot be used as configured: a missing or invalid option
 * or variable, the server answering that the base URL, team or environment is wrong (404 or
 * 400, with `status` set), or a secret that inject() cannot put in the environment.
 */
class ConfigurationError extends CvsmError {}

/** The server rejected the token (HTTP 401); the cache is emptied. */
class AuthenticationError extends CvsmError {}

/** The token may not do this (HTTP 403); the cache is emptied. */
class PermissionDeniedError extends CvsmError {}

/**
 * The name is not a valid secret name (no request is made, status
 * null), or is absent in the environment (the by-name read answered 404 and the listing found
 * the team: status 404). When a secret differs only in case, `suggestion` holds its name and
 * the message suggests it.
 */
class SecretNotFoundError extends CvsmError {}

/**
 * The server answered HTTP 429; `retryAfter` is the number of whole seconds the server asked
 * to wait (`Retry-After` as seconds or as an HTTP date), or null.
 */
class RateLimitError extends CvsmError {
  /**
   * @param {string} message What went wrong.
   * @param {{ status?: number, retryAfter?: number | null, requestId?: string | null, cause?: unknown }} [options]
   *   As for CvsmError, plus `retryAfter`.
   */
  constructor(message, { status = 429, retryAfter = null, ...rest } = {}) {
    super(message, { status, ...rest });
    this.retryAfter = retryAfter;
  }
}

/**
 * Any other non-2xx answer, including a 5xx after the retries and a 3xx (redirects
 * are never followed); `status` is set.
 */
class ApiError extends CvsmError {}

/**
 * No usable answer arrived: connection refused or dropped, TLS failure,
 * timeout, or an unreadable answer (a 2xx whose body is not the JSON promised), after the
 * retries. `status` is null.
 */
class NetworkError extends CvsmError {}

/**
 * A value of an end-to-end team does not open on this side: its sealed envelope is malformed,
 * does not authenticate for the team, environment and name asked for, or is under another key
 * version than the team keys the server hands this token; or that team key's wrap does not open
 * with the token's key part, or the key does not chain back to the token's pin (docs/e2e.md,
 * format 2). Never retried, never answered with a kept value; `status` is null.
 * The message names the secret, never a value or a key.
 */
class DecryptionError extends CvsmError {}

for (const cls of [
  CvsmError,
  ConfigurationError,
  AuthenticationError,
  PermissionDeniedError,
  SecretNotFoundError,
  RateLimitError,
  ApiError,
  NetworkError,
  DecryptionError,
]) {
  Object.defineProperty(cls.prototype, 'name', {
    value: cls.name,
    writable: true,
    enumerable: false,
    configurable: true,
  });
}

module.exports = {
  CvsmError,
  ConfigurationError,
  AuthenticationError,
  PermissionDeniedError,
  SecretNotFoundError,
  RateLimitError,
  ApiError,
  NetworkError,
  DecryptionError,
};
