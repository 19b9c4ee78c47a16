'use strict';
/**
 * transport: the HTTP layer. One authenticated GET with a per-attempt timeout, retries with
 * full-jitter backoff on network errors and 502/503/504, and the mapping from HTTP status to
 * the error classes. It is the only module that sees the token.
 */

const {
  ApiError,
  AuthenticationError,
  NetworkError,
  PermissionDeniedError,
  RateLimitError,
  SecretNotFoundError,
} = require('./errors');

const VERSION = '0.1.0';
const USER_AGENT = `cvsm-node/${VERSION}`;
const RETRYABLE_STATUSES = new Set([502, 503, 504]);

/** backoffMs returns a random delay in [0, 100 * 2**attempt) milliseconds (full jitter). */
function backoffMs(attempt) {
  return Math.random() * 100 * 2 ** attempt;
}

function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/**
 * parseRetryAfter turns a Retry-After header (seconds or an HTTP date) into whole seconds,
 * or null when it is absent or unreadable.
 */
function parseRetryAfter(header) {
  if (header === null || header === undefined) return null;
  const text = header.trim();
  if (/^[0-9]+$/.test(text)) return Number(text);
  const when = Date.parse(text);
  if (Number.isNaN(when)) return null;
  return Math.max(0, Math.ceil((when - Date.now()) / 1000));
}

/** describeCause names the low-level reason of a failed fetch (ECONNREFUSED, ...). */
function describeCause(err) {
  const cause = err && err.cause;
  if (cause && typeof cause === 'object') {
    if (cause.code) return String(cause.code);
    if (cause.message) return String(cause.message);
  }
  return err && err.message ? String(err.message) : 'unknown error';
}

/**
 * Transport performs GET requests against one base URL with one token. It never puts the
 * token in an error message, and its printed form leaves the token out.
 */
class Transport {
  #token;
  #baseUrl;
  #timeoutMs;
  #maxRetries;
  #onAuthError;

  constructor({ token, baseUrl, timeout, maxRetries, onAuthError = () => {} }) {
    this.#token = token;
    this.#baseUrl = baseUrl;
    this.#timeoutMs = Math.max(1, Math.ceil(timeout * 1000));
    this.#maxRetries = maxRetries;
    this.#onAuthError = onAuthError;
  }

  /**
   * getJson sends `GET {baseUrl}{path}?{query}` and returns the parsed JSON body, retrying
   * network errors and 502/503/504 up to maxRetries times. Throws a CvsmError subclass.
   */
  async getJson(path, query) {
    let url = this.#baseUrl + path;
    if (query) {
      const search = new URLSearchParams(query).toString();
      if (search) url += `?${search}`;
    }
    for (let attempt = 0; ; attempt++) {
      let response;
      try {
        response = await this.#attempt(url, path);
      } catch (err) {
        if (err instanceof NetworkError && attempt < this.#maxRetries) {
          await sleep(backoffMs(attempt));
          continue;
        }
        throw err;
      }
      if (RETRYABLE_STATUSES.has(response.status) && attempt < this.#maxRetries) {
        await sleep(backoffMs(attempt));
        continue;
      }
      if (response.status >= 200 && response.status < 300) {
        return response.body;
      }
      throw this.#errorFor(response);
    }
  }

  /** #attempt makes one request; a 2xx body that is not JSON counts as a network error. */
  async #attempt(url, path) {
    let res;
    let text;
    try {
      res = await fetch(url, {
        method: 'GET',
        headers: {
          Authorization: `Bearer ${this.#token}`,
          Accept: 'application/json',
          'User-Agent': USER_AGENT,
        },
        redirect: 'manual',
        signal: AbortSignal.timeout(this.#timeoutMs),
      });
      text = await res.text();
    } catch (err) {
      if (err && (err.name === 'TimeoutError' || err.name === 'AbortError')) {
        throw new NetworkError(
          `GET ${path} timed out after ${this.#timeoutMs / 1000}s`,
          { cause: err },
        );
      }
      throw new NetworkError(`GET ${path} failed: ${this.#redact(describeCause(err))}`, {
        cause: err,
      });
    }
    let body = null;
    let parsed = false;
    try {
      body = JSON.parse(text);
      parsed = true;
    } catch {
      // handled below: only a success needs a readable body
    }
    if (res.ok && !parsed) {
      throw new NetworkError(`GET ${path} returned an unreadable response (status ${res.status})`);
    }
    return { status: res.status, statusText: res.statusText, headers: res.headers, body };
  }

  /** #errorFor maps a non-2xx response to its error class, with the server's message. */
  #errorFor({ status, statusText, headers, body }) {
    let detail = statusText || 'request failed';
    if (body && typeof body === 'object' && typeof body.error === 'string' && body.error) {
      detail = body.error;
    }
    const message = `${status}: ${this.#redact(detail)}`;
    switch (status) {
      case 401:
        this.#onAuthError();
        return new AuthenticationError(message, { status });
      case 403:
        return new PermissionDeniedError(message, { status });
      case 404:
        return new SecretNotFoundError(message, { status });
      case 429:
        return new RateLimitError(message, {
          status,
          retryAfter: parseRetryAfter(headers.get('retry-after')),
        });
      default:
        return new ApiError(message, { status });
    }
  }

  /** #redact removes the token from text that may reach an error message. */
  #redact(text) {
    return this.#token ? String(text).split(this.#token).join('[redacted]') : String(text);
  }
}

module.exports = { Transport, VERSION, USER_AGENT, parseRetryAfter, backoffMs };
