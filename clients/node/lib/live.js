'use strict';
/**
 * live: the change stream of a live client (`live: true`, CVSM_LIVE=1, rule R16).
 *
 * A live client keeps one connection to `GET {baseUrl}/teams/{team}/secrets/changes?environment=`,
 * server-sent events of names and versions, never values. It is opened at the client's first
 * read and shared by every name the client reads. Its `snapshot` (on each connect) and each
 * `change` tell the client which cached values stopped being current; the next read of such a
 * name fetches it. While the stream is down the cache works as without `live` (cacheTtl,
 * staleIfError) and the stream is opened again after a jittered, growing pause, with
 * `Last-Event-ID` when an event carried an `id`.
 *
 * The stream is an async loop on the client's fetch. Its pauses and its idle limit are unref'd
 * timers and, with the built-in transport, its socket is unref'd too: the stream alone never
 * keeps the process alive. `client.close()` ends it.
 */

const rules = require('./rules');

/** Milliseconds without a byte after which the stream counts as lost (the server sends a comment every 15 s). */
const READ_TIMEOUT_MS = rules.LIVE_READ_TIMEOUT_SECONDS * 1000;
/** The longest pause between two attempts, in seconds. */
const MAX_BACKOFF = rules.LIVE_MAX_BACKOFF_SECONDS;
/** The least pause after a 401, 403 or 404: a revoked token is not tried every few seconds. */
const REFUSED_BACKOFF = rules.LIVE_REFUSED_BACKOFF_SECONDS;
const REFUSED = new Set(rules.LIVE_REFUSED_STATUSES);
/** The type and code of the warning an outage of the stream is reported with, once per outage. */
const LIVE_WARNING = Object.freeze({ type: 'CvsmLiveWarning', code: 'CVSM_LIVE_DOWN' });

/**
 * Returns the pause in seconds before reconnection `attempt` (0 for the first): 0.5 s doubling
 * up to 30 s, taken at random between half and all of it.
 */
function reconnectDelay(attempt, random = Math.random) {
  return (0.5 + 0.5 * random()) * Math.min(MAX_BACKOFF, (rules.LIVE_BACKOFF_BASE_MS / 1000) * 2 ** attempt);
}

/** The change stream answered with a status other than 200. */
class StreamRefused extends Error {
  constructor(status, retryAfter = null) {
    super(`the change stream answered HTTP ${status}`);
    this.status = status;
    this.retryAfter = retryAfter;
  }
}

/** The server ended the stream with an `end` event. */
class StreamEnded extends Error {}

/** The stream sent no byte for READ_TIMEOUT_MS. */
class StreamIdle extends Error {}

/**
 * Decodes the lines of a `text/event-stream` into `[event, data]` pairs. Comments (`:`) are
 * skipped; `id` is remembered in `lastId`, for `Last-Event-ID`.
 */
class SseDecoder {
  lastId = null;
  #event = '';
  #data = [];

  /** Takes one line (without its line ending); returns `[event, data]` when a blank line ends one, else null. */
  line(line) {
    if (line === '') {
      const event = this.#event || 'message';
      const data = this.#data;
      this.#event = '';
      this.#data = [];
      return data.length > 0 ? [event, data.join('\n')] : null;
    }
    if (line.startsWith(':')) return null;
    const colon = line.indexOf(':');
    const field = colon === -1 ? line : line.slice(0, colon);
    let value = colon === -1 ? '' : line.slice(colon + 1);
    if (value.startsWith(' ')) value = value.slice(1);
    if (field === 'event') this.#event = value;
    else if (field === 'data') this.#data.push(value);
    else if (field === 'id' && !value.includes('\u0000')) this.lastId = value;
    return null;
  }
}

/**
 * Splits decoded text into lines ending in CR LF, LF or CR; `push` returns the complete lines,
 * keeping the rest (a CR at the end waits: an LF may follow in the next chunk).
 */
class LineSplitter {
  #rest = '';

  push(text) {
    const buffer = this.#rest + text;
    const lines = [];
    let start = 0;
    for (let i = 0; i < buffer.length; i++) {
      const c = buffer.charCodeAt(i);
      if (c === 10) {
        lines.push(buffer.slice(start, i));
        start = i + 1;
      } else if (c === 13) {
        if (i + 1 === buffer.length) break;
        lines.push(buffer.slice(start, i));
        if (buffer.charCodeAt(i + 1) === 10) i += 1;
        start = i + 1;
      }
    }
    this.#rest = buffer.slice(start);
    return lines;
  }
}

/** Resolves after `ms` milliseconds, or at once when `signal` aborts; the timer is unref'd. */
function pause(ms, signal) {
  return new Promise((resolve) => {
    if (signal.aborted) {
      resolve();
      return;
    }
    const done = () => {
      clearTimeout(timer);
      signal.removeEventListener('abort', done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    timer.unref?.();
    signal.addEventListener('abort', done, { once: true });
  });
}

/**
 * Follows one client's change stream until `close()`.
 * - `open({lastEventId, signal})` opens one connection and resolves to `{status, headers, body}`
 *   (body a ReadableStream of bytes); it rejects when the connection fails.
 * - `onSnapshot(versions)` (a Map name -> version), `onChange(name, version | null)`,
 *   `onLost()` (the versions the stream said are no longer known) and `onRefused()` (a 401 or
 *   403, or an `end` with 401, 403 or 404: empty the cache) are the client's.
 * - `describe` names the team and environment in the warning; never a token.
 */
class LiveStream {
  #open;
  #handlers;
  #describe;
  #closer = new AbortController();
  #connection = null;
  #loop = null;
  #attempt = 0;
  #outageReported = false;
  /** The id of the last event that carried one, sent as Last-Event-ID on a reconnection. */
  lastEventId = null;
  /** Whether the stream is up now (its snapshot taken). */
  connected = false;
  /** Snapshots received: one per connection that got that far. */
  connections = 0;

  #readTimeoutMs;

  constructor({ open, onSnapshot, onChange, onLost, onRefused, describe, random = Math.random, readTimeoutMs = READ_TIMEOUT_MS }) {
    this.#open = open;
    this.#readTimeoutMs = readTimeoutMs;
    this.#handlers = { onSnapshot, onChange, onLost, onRefused, random };
    this.#describe = describe;
  }

  /** Starts the loop once; later calls do nothing. */
  start() {
    if (this.#loop === null && !this.#closer.signal.aborted) this.#loop = this.#run();
  }

  get started() {
    return this.#loop !== null;
  }

  /** Ends the stream: aborts the connection and the pause; resolves once the loop has stopped. */
  async close() {
    this.#closer.abort();
    this.#connection?.abort();
    this.connected = false;
    if (this.#loop !== null) await this.#loop;
  }

  async #run() {
    const closed = this.#closer.signal;
    while (!closed.aborted) {
      let delay;
      try {
        await this.#followOnce();
        delay = this.lost('the server closed it');
      } catch (err) {
        if (closed.aborted) break;
        delay = err instanceof StreamRefused ? this.refused(err) : this.lost(reasonOf(err));
      }
      await pause(delay * 1000, closed);
    }
  }

  async #followOnce() {
    const connection = new AbortController();
    let reader = null;
    let idle = null;
    let idled = false;
    // Ends this connection: the signal for a fetch that honours it, the reader for one that
    // does not (a pending read then resolves as done).
    const cancel = () => {
      connection.abort();
      reader?.cancel().catch(() => {});
    };
    this.#connection = { abort: cancel };
    const aborted = new Promise((_, reject) => {
      connection.signal.addEventListener('abort', () => reject(new Error('aborted')), { once: true });
    });
    aborted.catch(() => {});
    try {
      const res = await Promise.race([
        this.#open({ lastEventId: this.lastEventId, signal: connection.signal }),
        aborted,
      ]);
      if (res.status !== 200) {
        res.body?.cancel?.().catch(() => {});
        throw new StreamRefused(res.status, res.retryAfter ?? null);
      }
      if (!res.body || typeof res.body.getReader !== 'function') {
        throw new Error('the answer has no readable body');
      }
      reader = res.body.getReader();
      if (connection.signal.aborted) reader.cancel().catch(() => {});
      const arm = () => {
        clearTimeout(idle);
        idle = setTimeout(() => {
          idled = true;
          cancel();
        }, this.#readTimeoutMs);
        idle.unref?.();
      };
      arm();
      const decoder = new TextDecoder();
      const lines = new LineSplitter();
      const sse = new SseDecoder();
      for (;;) {
        let chunk;
        try {
          chunk = await reader.read();
        } catch (err) {
          if (idled) break;
          throw err;
        }
        if (chunk.done) break;
        arm();
        for (const line of lines.push(decoder.decode(chunk.value, { stream: true }))) {
          const event = sse.line(line);
          if (sse.lastId !== null) this.lastEventId = sse.lastId;
          if (event !== null) this.event(event[0], event[1]);
        }
      }
      if (idled) throw new StreamIdle(`no byte for ${this.#readTimeoutMs / 1000} s`);
    } finally {
      clearTimeout(idle);
      this.#connection = null;
      cancel();
    }
  }

  /** Applies one event; throws StreamEnded on `end`. */
  event(name, data) {
    let payload;
    try {
      payload = JSON.parse(data);
    } catch {
      return;
    }
    if (payload === null || typeof payload !== 'object' || Array.isArray(payload)) return;
    if (name === 'snapshot') {
      const versions = new Map();
      const secrets = payload.secrets;
      if (secrets !== null && typeof secrets === 'object' && !Array.isArray(secrets)) {
        for (const [secret, item] of Object.entries(secrets)) {
          if (item !== null && typeof item === 'object' && Number.isSafeInteger(item.version)) {
            versions.set(secret, item.version);
          }
        }
      }
      this.#handlers.onSnapshot(versions);
      this.connections += 1;
      this.#attempt = 0;
      this.#outageReported = false;
      this.connected = true;
    } else if (name === 'change') {
      if (typeof payload.name !== 'string') return;
      if (payload.deleted === true) this.#handlers.onChange(payload.name, null);
      else if (Number.isSafeInteger(payload.version)) this.#handlers.onChange(payload.name, payload.version);
    } else if (name === 'end') {
      if (REFUSED.has(payload.status)) this.#handlers.onRefused();
      throw new StreamEnded(`the server ended the change stream (${payload.reason || payload.status})`);
    }
  }

  /**
   * Notes that the stream is down (`reason`: never a token or value) and returns the pause in
   * seconds before the next attempt. The first time in an outage it emits a process warning.
   */
  lost(reason) {
    this.connected = false;
    this.#handlers.onLost();
    if (!this.#outageReported) {
      this.#outageReported = true;
      process.emitWarning(
        `cvsm: the change stream of ${this.#describe} is down (${reason}); values are cached for ` +
          'cacheTtl until it is back; reconnecting',
        LIVE_WARNING,
      );
    }
    const delay = reconnectDelay(this.#attempt, this.#handlers.random);
    this.#attempt += 1;
    return delay;
  }

  /** Notes that the stream was refused and returns the pause in seconds before the next attempt. */
  refused(refusal) {
    let delay = this.lost(refusal.message);
    if (refusal.status === 401 || refusal.status === 403) this.#handlers.onRefused();
    if (REFUSED.has(refusal.status)) delay = Math.max(delay, REFUSED_BACKOFF);
    if (refusal.retryAfter !== null) delay = Math.max(delay, refusal.retryAfter);
    return delay;
  }
}

/** Names what broke a connection: the error's class and code, never its whole text. */
function reasonOf(err) {
  if (err instanceof StreamEnded || err instanceof StreamIdle) return err.message;
  if (err && err.name === 'NetworkError' && err.message) return err.message;
  const cause = err && err.cause;
  if (cause && cause.code) return String(cause.code);
  return (err && err.name) || 'error';
}

module.exports = {
  LiveStream,
  SseDecoder,
  LineSplitter,
  StreamRefused,
  reconnectDelay,
  READ_TIMEOUT_MS,
  MAX_BACKOFF,
  REFUSED_BACKOFF,
  LIVE_WARNING,
};
