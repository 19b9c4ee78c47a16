'use strict';
/**
 * errors: every error the cvsm client throws. All of them extend CvsmError, so a caller can
 * catch one base class or branch on the subclass; none of them ever holds a token or a value.
 */

/**
 * CvsmError is the base class of every error the client throws. `status` is the HTTP status
 * that caused it, or null when there was no HTTP response (configuration, network).
 */
class CvsmError extends Error {
  constructor(message, { status = null, cause } = {}) {
    super(message, cause === undefined ? undefined : { cause });
    this.status = status;
  }
}

/**
 * ConfigurationError means the client cannot be used as configured: a missing token, base URL
 * or team, an invalid option, or a team slug that matches none of the caller's teams.
 */
class ConfigurationError extends CvsmError {}

/** AuthenticationError means the server rejected the token (HTTP 401); the cache is emptied. */
class AuthenticationError extends CvsmError {}

/** PermissionDeniedError means the token's user may not do this (HTTP 403). */
class PermissionDeniedError extends CvsmError {}

/**
 * SecretNotFoundError means the name is absent in the environment (status null), or the server
 * answered HTTP 404. When a secret differs only in case, the message suggests its name.
 */
class SecretNotFoundError extends CvsmError {}

/**
 * RateLimitError means the server answered HTTP 429; `retryAfter` is the number of whole
 * seconds the server asked to wait, or null when it did not say.
 */
class RateLimitError extends CvsmError {
  constructor(message, { status = 429, retryAfter = null, cause } = {}) {
    super(message, { status, cause });
    this.retryAfter = retryAfter;
  }
}

/** ApiError is any other non-2xx answer, including a 5xx after the retries; `status` is set. */
class ApiError extends CvsmError {}

/**
 * NetworkError means no usable answer arrived: connection refused or dropped, timeout, or an
 * unreadable response, after the retries.
 */
class NetworkError extends CvsmError {}

for (const cls of [
  CvsmError,
  ConfigurationError,
  AuthenticationError,
  PermissionDeniedError,
  SecretNotFoundError,
  RateLimitError,
  ApiError,
  NetworkError,
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
};
