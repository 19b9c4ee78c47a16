'use strict';
/**
 * transport: the HTTP layer. One authenticated GET whose timeout bounds the whole attempt, the
 * check that a 2xx body is the JSON the request promises, retries with full-jitter backoff on
 * network errors, unreadable answers and 502/503/504, and the mapping from HTTP status to the
 * error classes. It is the only module that sees the token.
 *
 * Requests go through undici's fetch with a dispatcher made for this client: the proxy from
 * the environment (read when the client was created) and the private CA, if any. A caller's
 * `fetch` replaces both. A live client's change stream (`openStream`) goes through a dispatcher
 * of its own, made the same way, whose sockets are unref'd.
 */

const undici = require('undici');
/** The version of this package, sent in the user agent `cvsm-node/<VERSION>`. @type {string} */
const { version: VERSION } = require('../package.json');
const {
  ApiError,
  AuthenticationError,
  ConfigurationError,
  NetworkError,
  PermissionDeniedError,
  RateLimitError,
  SecretNotFoundError,
} = require('./errors');
const { parseRetryAfter } = require('./retry-after');
const rules = require('./rules');
const { withoutUserinfo, USERINFO } = require('./config');

const USER_AGENT = `${rules.USER_AGENT_PREFIX}node/${VERSION}`;
const RETRYABLE_STATUSES = new Set(rules.RETRYABLE_STATUSES);

/** Returns a random delay in [0, 100 * 2**attempt) milliseconds (full jitter). */
function backoffMs(attempt) {
  return Math.random() * rules.RETRY_BACKOFF_BASE_MS * 2 ** attempt;
}

function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
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
 * Returns the undici dispatcher of one client: direct, or through `proxy`
 * unless the base URL's host matches `noProxy`, trusting only `ca` when it is given. Only the
 * proxy of the base URL's scheme is passed on, so undici never falls back to another variable
 * and never reads the environment again.
 */
function createDispatcher({ protocol, proxy, noProxy, ca, unref = false }) {
  const tls = ca === null ? undefined : { ca };
  try {
    return new undici.EnvHttpProxyAgent({
      ...(unref ? unrefFactories() : {}),
      httpProxy: protocol === 'http:' && proxy ? proxy.url : '',
      httpsProxy: protocol === 'https:' && proxy ? proxy.url : '',
      noProxy,
      // Plain http goes to the proxy as an absolute-form request, https through CONNECT.
      proxyTunnel: false,
      connect: tls,
      requestTls: tls,
    });
  } catch (err) {
    throw new ConfigurationError(
      `${proxy ? proxy.variable : 'proxy'}: the proxy cannot be used (${err.message})`,
    );
  }
}

/**
 * Returns the undici factories that unref every socket they connect (the change stream's
 * dispatcher only): an open stream must not keep the process alive on its own. A read's socket
 * stays ref'd, so that a pending read keeps the process alive until it is answered.
 */
function unrefFactories() {
  const unrefConnector = (connect) => {
    const base = typeof connect === 'function' ? connect : undici.buildConnector({ ...connect });
    return (options, callback) =>
      base(options, (err, socket) => {
        if (!err && socket) {
          socket.unref();
          // undici refs a socket again while it carries a request: not this one's.
          socket.ref = () => socket;
        }
        callback(err, socket);
      });
  };
  return {
    factory: (origin, options) => new undici.Pool(origin, { ...options, connect: unrefConnector(options.connect) }),
    clientFactory: (origin, options) =>
      new undici.Pool(origin, { ...options, connect: unrefConnector(options.connect) }),
  };
}

/** A 2xx answer whose body is not the JSON the request promises; retried like a dropped connection. */
class UnreadableAnswer extends NetworkError {}

/**
 * Performs GET requests against one base URL with one token. It never puts the
 * token in an error message, and its printed form leaves the token out.
 */
class Transport {
  #token;
  /** What of the base URL's user and password an error message must not show. */
  #userinfo = [];
  #baseUrl;
  #timeoutMs;
  #maxRetries;
  #onRefused;
  #fetch;
  /** The fetch of the change stream: the caller's, else undici's on a dispatcher of its own (made at the first stream). */
  #streamFetch = null;
  #streamDispatcher = null;
  #dispatcherOptions = null;

  /**
   * `fetch` is the caller's fetch function, or null for undici's fetch with a dispatcher from
   * `proxy`, `noProxy` and `ca`. `onRefused` is called when the server refuses the token or its
   * rights (401 or 403), before the error is thrown.
   */
  constructor({ token, baseUrl, timeout, maxRetries, fetch = null, proxy = null, noProxy = '', ca = null, onRefused = () => {} }) {
    this.#token = token;
    // Requests go to the base URL without its user and password: only the Bearer token is sent.
    this.#baseUrl = withoutUserinfo(baseUrl);
    this.#userinfo = userinfoOf(baseUrl);
    this.#timeoutMs = Math.max(1, Math.ceil(timeout * 1000));
    this.#maxRetries = maxRetries;
    this.#onRefused = onRefused;
    if (fetch !== null) {
      this.#fetch = fetch;
      this.#streamFetch = fetch;
    } else {
      this.#dispatcherOptions = { protocol: new URL(baseUrl).protocol, proxy, noProxy, ca };
      const dispatcher = createDispatcher(this.#dispatcherOptions);
      this.#fetch = (url, init) => undici.fetch(url, { ...init, dispatcher });
    }
  }

  /**
   * Opens the change stream at `path` (`query`, `Last-Event-ID` when `lastEventId` is not null):
   * resolves to `{status, retryAfter, body}` once the headers arrive, within the timeout;
   * `signal` aborts it, body included. A failure to connect is a NetworkError (never retried
   * here: the stream has its own pauses). The stream's connection is its own, never one of the
   * reads', and with the built-in transport its socket is unref'd.
   */
  async openStream(path, { query, lastEventId = null, signal }) {
    if (this.#streamFetch === null) {
      this.#streamDispatcher = createDispatcher({ ...this.#dispatcherOptions, unref: true });
      const dispatcher = this.#streamDispatcher;
      this.#streamFetch = (url, init) => undici.fetch(url, { ...init, dispatcher });
    }
    let url = this.#baseUrl + path;
    const search = new URLSearchParams(query).toString();
    if (search) url += `?${search}`;
    const headers = {
      Authorization: `Bearer ${this.#token}`,
      Accept: rules.ACCEPT_EVENT_STREAM,
      'Cache-Control': 'no-cache',
      'User-Agent': USER_AGENT,
    };
    if (lastEventId !== null) headers[rules.HEADER_LAST_EVENT_ID] = lastEventId;
    const controller = new AbortController();
    const abort = () => controller.abort();
    signal.addEventListener('abort', abort, { once: true });
    const timer = setTimeout(abort, this.#timeoutMs);
    timer.unref?.();
    // The race keeps the limit (and close) even for a fetch that ignores its signal.
    const gaveUp = new Promise((_, reject) => {
      controller.signal.addEventListener('abort', () => reject(new Error('aborted')), { once: true });
    });
    gaveUp.catch(() => {});
    try {
      const res = await Promise.race([
        this.#streamFetch(url, { method: 'GET', headers, redirect: 'manual', signal: controller.signal }),
        gaveUp,
      ]);
      const retryAfter = res.headers ? parseRetryAfter(res.headers.get(rules.HEADER_RETRY_AFTER)) : null;
      return { status: res.status, retryAfter, body: res.body ?? null };
    } catch (err) {
      if (signal.aborted) throw err;
      const why = controller.signal.aborted ? `timed out after ${this.#timeoutMs / 1000}s` : this.#redact(describeCause(err));
      throw new NetworkError(`GET ${path} failed: ${why}`);
    } finally {
      clearTimeout(timer);
    }
  }

  /** Closes the change stream's own connections, if any (the caller's fetch is the caller's). */
  async closeStream() {
    const dispatcher = this.#streamDispatcher;
    this.#streamDispatcher = null;
    if (dispatcher !== null) await dispatcher.destroy().catch(() => {});
  }

  /**
   * Sends `GET {baseUrl}{path}?{query}` and returns `{body, requestId, headers}`, the parsed
   * JSON body, the answer's X-Request-Id (or null) and its headers (a Headers; empty when the
   * caller's fetch gave none). Options:
   * - `validate(body)`: whether a 2xx body has the promised shape; when not, the answer is
   *   unreadable and retried like a dropped connection;
   * - `configuration`: status -> hint; an answer with one of these statuses is a
   *   ConfigurationError (the base URL, team or environment is wrong), the hint in its message.
   * Retries network errors, unreadable answers and 502/503/504 up to maxRetries times.
   * Throws a CvsmError subclass.
   */
  async getJson(path, { query, validate = () => true, configuration = {} } = {}) {
    let url = this.#baseUrl + path;
    if (query) {
      const search = new URLSearchParams(query).toString();
      if (search) url += `?${search}`;
    }
    for (let attempt = 0; ; attempt++) {
      let answer;
      try {
        answer = await this.#attempt(url, path, validate);
      } catch (err) {
        if (err instanceof NetworkError && attempt < this.#maxRetries) {
          await sleep(backoffMs(attempt));
          continue;
        }
        if (err instanceof UnreadableAnswer) {
          throw new NetworkError(err.message, { requestId: err.requestId });
        }
        throw err;
      }
      if (RETRYABLE_STATUSES.has(answer.status) && attempt < this.#maxRetries) {
        await sleep(backoffMs(attempt));
        continue;
      }
      if (answer.status >= 200 && answer.status < 300) {
        return { body: answer.body, requestId: answer.requestId, headers: answer.headers };
      }
      throw this.#errorFor(answer, configuration);
    }
  }

  /**
   * Makes one request and reads its whole body within the timeout; a 2xx whose body
   * is not JSON of the promised shape is an UnreadableAnswer.
   */
  async #attempt(url, path, validate) {
    const controller = new AbortController();
    let timer;
    const timedOut = new Promise((_, reject) => {
      timer = setTimeout(() => {
        const err = new NetworkError(`GET ${path} timed out after ${this.#timeoutMs / 1000}s`);
        controller.abort(err);
        reject(err);
      }, this.#timeoutMs);
    });
    const exchange = (async () => {
      const res = await this.#fetch(url, {
        method: 'GET',
        headers: {
          Authorization: `Bearer ${this.#token}`,
          Accept: rules.ACCEPT_JSON,
          'User-Agent': USER_AGENT,
        },
        redirect: 'manual',
        signal: controller.signal,
      });
      return { res, text: await res.text() };
    })();
    let res;
    let text;
    try {
      // The race keeps the limit even for a fetch that ignores its signal.
      ({ res, text } = await Promise.race([exchange, timedOut]));
    } catch (err) {
      if (err instanceof NetworkError) throw err;
      if (controller.signal.aborted) throw controller.signal.reason;
      throw new NetworkError(`GET ${path} failed: ${this.#redact(describeCause(err))}`, {
        cause: err,
      });
    } finally {
      clearTimeout(timer);
      exchange.catch(() => {}); // settled after a timeout: nothing is waiting for it
    }
    const requestId = (res.headers && res.headers.get(rules.HEADER_REQUEST_ID)) || null;
    let body = null;
    let parsed = false;
    try {
      body = JSON.parse(text);
      parsed = true;
    } catch {
      // handled below: only a success needs a readable body
    }
    const ok = res.status >= 200 && res.status < 300;
    if (ok && !(parsed && validate(body))) {
      throw new UnreadableAnswer(
        `GET ${path} returned an unreadable response (status ${res.status}: ` +
          `${parsed ? 'not the expected JSON shape' : 'not JSON'})`,
        { requestId },
      );
    }
    const headers = res.headers || new Headers();
    return { status: res.status, statusText: res.statusText, headers, body, requestId };
  }

  /** Maps a non-2xx answer to its error class, with the server's message. */
  #errorFor({ status, statusText, headers, body, requestId }, configuration) {
    let detail = statusText || (status >= 300 && status < 400 ? 'redirect not followed' : 'request failed');
    if (body && typeof body === 'object' && typeof body.error === 'string' && body.error) {
      const characters = [...body.error];
      detail = characters.length > rules.MAX_SERVER_MESSAGE
        ? `${characters.slice(0, rules.MAX_SERVER_MESSAGE).join('')}...`
        : body.error;
    }
    const message = `${status}: ${this.#redact(detail)}`;
    const fields = { status, requestId };
    if (Object.hasOwn(configuration, status)) {
      return new ConfigurationError(`${message}; ${configuration[status]}`, fields);
    }
    switch (status) {
      case 401:
        this.#onRefused();
        return new AuthenticationError(message, fields);
      case 403:
        this.#onRefused();
        return new PermissionDeniedError(message, fields);
      case 404:
        return new SecretNotFoundError(message, fields);
      case 429:
        return new RateLimitError(message, {
          ...fields,
          retryAfter: parseRetryAfter(headers.get(rules.HEADER_RETRY_AFTER)),
        });
      default:
        // 0 is what a browser-style fetch reports for a redirect it did not follow.
        return new ApiError(message, { ...fields, status: status === 0 ? null : status });
    }
  }

  /** Removes the token, and a user and password in the base URL, from text that may reach an error message. */
  #redact(text) {
    let out = String(text);
    for (const part of this.#userinfo) out = out.split(part).join('***');
    return this.#token ? out.split(this.#token).join(rules.REDACTED) : out;
  }
}

/**
 * The forms in which a base URL's user and password may appear in a message: as written, as the
 * URL parser encodes them, and the password alone (longest first).
 * @param {string} baseUrl
 * @returns {string[]}
 */
function userinfoOf(baseUrl) {
  const written = USERINFO.exec(baseUrl);
  if (written === null) return [];
  const parts = [written[2]];
  try {
    const url = new URL(baseUrl);
    parts.push(`${url.username}:${url.password}`, url.password);
  } catch {
    // resolveConfig has parsed it already
  }
  return [...new Set(parts.filter((part) => part !== '' && part !== ':'))].sort((a, b) => b.length - a.length);
}

module.exports = { Transport, VERSION, USER_AGENT, parseRetryAfter, backoffMs };
