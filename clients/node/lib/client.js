'use strict';
/**
 * client: the cvsm Client. It reads secrets of one team and environment, caches them for
 * cacheTtl seconds and writes them into process.env on request. With an end-to-end team's token
 * it also fetches the team key once, checks that it chains back to the token's pin, and opens
 * every value it reads (lib/e2e.js).
 */

const util = require('node:util');
const { resolveConfig, displayUrl } = require('./config');
const { TtlCache } = require('./cache');
const { Transport } = require('./transport');
const { LiveStream } = require('./live');
const { openValue, parseEnvelope, parseLink, unwrapTeamKey, verifyChain, walkDown } = require('./e2e');
const rules = require('./rules');
const {
  ApiError,
  ConfigurationError,
  DecryptionError,
  NetworkError,
  RateLimitError,
  SecretNotFoundError,
} = require('./errors');

/** A valid secret name: what get() asks the server for. */
const SECRET_NAME_RE = new RegExp(`^${rules.SECRET_NAME_PATTERN}$`);
/** A name inject() can put in the process environment. */
const ENV_NAME_RE = new RegExp(`^${rules.VARIABLE_NAME_PATTERN}$`);

/** The hints of the configuration errors the server's answers point to (rule R9). */
const WRONG_BASE_URL_OR_TEAM = 'check the base URL (CVSM_BASE_URL, it includes /api/v1) and the team (CVSM_TEAM)';
const WRONG_ENVIRONMENT = 'check the environment (CVSM_ENVIRONMENT)';
/** The hint of a 400 to the team key: the token has a key part but the team is not end-to-end. */
const NOT_END_TO_END = 'the team (CVSM_TEAM) is not end-to-end, but the token has a key part';
/** The message of a read of an end-to-end team with a token that lacks its key part. */
const KEY_PART_MISSING =
  `${rules.MESSAGE_KEYLESS_E2E} (CVSM_TOKEN must be the whole ` +
  'token as it was shown, cvsm_<64 hex>.<private key>.<key version>.<commitment>)';

/** The errors of a listing made after a by-name 404: the server said the secret is gone, so no kept value answers them. */
const AFTER_NOT_FOUND = new WeakSet();

/** The type and code of the warning a stale value is logged with (process.emitWarning). */
const STALE_WARNING = Object.freeze({ type: 'CvsmStaleWarning', code: 'CVSM_STALE_VALUE' });

function cacheKey(environment, name) {
  return `${environment}\u0000${name}`;
}

/** The shapes the answers promise (rule R3); anything else is an unreadable answer. */
const isObject = (body) => body !== null && typeof body === 'object' && !Array.isArray(body);
const SHAPES = {
  listing: (body) => isObject(body) && Array.isArray(body.secrets),
  value: (body) => isObject(body) && isObject(body.secret) && typeof body.value === 'string',
  export: (body) => isObject(body) && Object.values(body).every((v) => typeof v === 'string'),
  teamKey: (body) =>
    isObject(body) &&
    typeof body.team_id === 'string' &&
    Number.isSafeInteger(body.key_version) &&
    body.key_version > 0 &&
    typeof body.wrapped_key === 'string',
};

/**
 * Reports whether a failed refresh may be answered with a kept value (rule R14): a
 * network error (an unreadable answer included), a 5xx or a 429. Never a 401 or 403, nor any
 * other error.
 */
function servesStale(err) {
  return (
    err instanceof NetworkError ||
    err instanceof RateLimitError ||
    (err instanceof ApiError && err.status !== null && err.status >= 500 && err.status <= 599)
  );
}

/**
 * Returns the links of a key answer as a Map from key version to link (absent or null: none), or
 * throws DecryptionError when they are not `[{key_version, link}, ...]` with each version (2 or
 * more) once and each link `cvsm-link1.<nonce>.<ct>`: every link is checked, needed or not.
 */
function linksOf(links) {
  const byVersion = new Map();
  if (links === undefined || links === null) return byVersion;
  if (!Array.isArray(links)) {
    throw new DecryptionError('the links of the key answer are not a list');
  }
  for (const item of links) {
    if (
      !isObject(item) ||
      !Number.isSafeInteger(item.key_version) ||
      item.key_version < 2 ||
      typeof item.link !== 'string' ||
      byVersion.has(item.key_version)
    ) {
      throw new DecryptionError('the links of the key answer are not [{key_version, link}, ...]');
    }
    parseLink(item.link, item.key_version);
    byVersion.set(item.key_version, item.link);
  }
  return byVersion;
}

/**
 * Returns the team key of `version` (at most the held current version) from the verified keys
 * `held`, walking on down the links below the lowest verified one and keeping what it reaches;
 * DecryptionError when a link is missing or does not open.
 */
function keyFor(held, version) {
  const lowest = Math.min(...held.keys.keys());
  if (version < lowest) {
    for (const [v, key] of walkDown(held.keys.get(lowest), lowest, held.teamId, held.links, version)) {
      held.keys.set(v, key);
    }
  }
  return held.keys.get(version);
}

/**
 * Reads the secrets of one team and environment from a cvsm server. Options (each falls back to its variable, read when
 * the client is created): `token` (CVSM_TOKEN; an end-to-end team's token carries its key part
 * after the dot, which is never sent), `baseUrl` (CVSM_BASE_URL, including /api/v1),
 * `team` (CVSM_TEAM, a team id or slug), `environment` (CVSM_ENVIRONMENT, default
 * "production"), `cacheTtl` (CVSM_CACHE_TTL, seconds, default 30, 0 disables), `timeout`
 * (CVSM_TIMEOUT, seconds per attempt, default 10), `maxRetries` (CVSM_MAX_RETRIES, default 2),
 * `staleIfError` (CVSM_STALE_IF_ERROR, seconds a value is kept after it stops being fresh, to
 * answer a failed refresh; default 0, off), `caFile` (CVSM_CA_FILE, a PEM bundle trusted instead
 * of the system store), `live` (CVSM_LIVE, default false: keep one change stream, opened at
 * the first read, that drops a changed value from the cache as soon as the change is announced;
 * `close()` ends it); and, without a variable, `onStale` (called each time a stale value is
 * served) and `fetch` (a fetch function that replaces the built-in transport). The proxy
 * variables (http_proxy, https_proxy, no_proxy and their upper-case forms) are read at the
 * same time.
 * @throws {ConfigurationError} When an option or variable is missing or invalid.
 */
class Client {
  #config;
  #transport;
  #values;
  #exports;
  #onStale;
  /** The names (and exports) whose stale serving was logged since they were last read fresh. */
  #warned = new Set();
  /** The X25519 key part of an end-to-end team's token (a KeyObject), or null. */
  #privateKey;
  /** The pin of an end-to-end team's token (`{keyVersion, commitment}`), or null. */
  #pin;
  /**
   * The team keys once fetched, unwrapped and verified against the pin: `{teamId, keyVersion,
   * keys, links}` (`keys` a Map from key version to KeyObject, `links` the team's back-links by
   * key version, to walk further down for older envelopes), or null.
   */
  #teamKey = null;
  /** The team key fetch in flight, shared by the reads that need it, or null. */
  #teamKeyFetch = null;
  /** Counts clearCache() calls, so that a fetch it overtook keeps nothing. */
  #generation = 0;
  /** The change stream of a live client (a LiveStream), or null without `live`. */
  #live = null;
  /** Whether close() was called: the stream is not opened again. */
  #closed = false;
  /** Counts the changes the stream announced, so that a fetch one overtook keeps nothing. */
  #stamp = 0;
  /** Name -> the stamp of its last change. */
  #changed = new Map();
  /** Name -> version, as the stream last said; null before a snapshot and while it is down. */
  #latest = null;
  /** Name -> the version its cached value holds (at least), when known. */
  #versions = new Map();

  /**
   * Creates a client from `options` and the `CVSM_*` variables. Sends no request.
   * @param {import('./index').ClientOptions} [options] Overrides of the variables, and the hooks
   *   only options can give (`onStale`, `fetch`).
   * @throws {ConfigurationError} When the token, base URL or team is missing, or a value is invalid.
   */
  constructor(options = {}) {
    const { token, privateKey, pin, ca, fetch, proxy, noProxy, onStale, ...config } = resolveConfig(
      options,
      process.env,
    );
    this.#config = Object.freeze(config);
    this.#onStale = onStale;
    this.#privateKey = privateKey;
    this.#pin = pin;
    this.#values = new TtlCache(config.cacheTtl, config.staleIfError);
    this.#exports = new TtlCache(config.cacheTtl, config.staleIfError);
    this.#transport = new Transport({
      token,
      baseUrl: config.baseUrl,
      timeout: config.timeout,
      maxRetries: config.maxRetries,
      fetch,
      proxy,
      noProxy,
      ca,
      onRefused: () => this.clearCache(),
    });
    if (config.live) {
      const environment = config.environment;
      this.#live = new LiveStream({
        open: (request) =>
          this.#transport.openStream(`${this.#teamPath()}/secrets/changes`, { query: { environment }, ...request }),
        onSnapshot: (versions) => this.#onSnapshot(versions),
        onChange: (name, version) => this.#onChange(name, version),
        onLost: () => {
          this.#latest = null;
        },
        onRefused: () => this.clearCache(),
        describe: `team ${JSON.stringify(config.team)}, environment ${JSON.stringify(environment)}`,
      });
    }
  }

  /** The API root the client calls, without a trailing slash. @type {string} */
  get baseUrl() {
    return this.#config.baseUrl;
  }

  /** The team id or slug as configured; it goes into every path as it is (percent-encoded). @type {string} */
  get team() {
    return this.#config.team;
  }

  /** The environment the client reads. @type {string} */
  get environment() {
    return this.#config.environment;
  }

  /** How many seconds a fetched value is reused; 0 means no cache. @type {number} */
  get cacheTtl() {
    return this.#config.cacheTtl;
  }

  /** The limit in seconds for each HTTP attempt, body included. @type {number} */
  get timeout() {
    return this.#config.timeout;
  }

  /** How many more attempts a GET gets after a network error or a 502/503/504. @type {number} */
  get maxRetries() {
    return this.#config.maxRetries;
  }

  /**
   * How many seconds a value is kept after it stops being fresh, to answer a refresh that fails
   * with a network error, a 5xx or a 429; 0 (the default) means never.
   * @type {number}
   */
  get staleIfError() {
    return this.#config.staleIfError;
  }

  /**
   * Whether the client keeps a change stream (option `live`, CVSM_LIVE), so that a changed
   * secret stops being served from the cache as soon as the change is announced. @type {boolean}
   */
  get live() {
    return this.#config.live;
  }

  /** Whether the change stream of a live client is up now (always false without `live`). @type {boolean} */
  get liveConnected() {
    return this.#live !== null && this.#live.connected;
  }

  /** The path of the PEM bundle trusted instead of the system store, or `null`. @type {string | null} */
  get caFile() {
    return this.#config.caFile;
  }

  /**
   * Reads one secret of the client's environment: from the cache when it holds a fresh entry,
   * else with one request to the by-name route. With `staleIfError`, a refresh that fails with a
   * network error, a 5xx or a 429 returns the kept value instead, reported through `onStale` and
   * a process warning. With an end-to-end team's token, the value read is a sealed envelope: the
   * first read also fetches the team key (kept until clearCache()), and the value is opened for
   * this environment and name; the cache holds the opened value.
   * @param {string} name The secret's name (case-sensitive).
   * @returns {Promise<string>} The secret's value.
   * @throws {SecretNotFoundError} Without a request when `name` is not a valid secret name, and
   *   when it is absent; when a secret differs only in case, the error's `suggestion` (and
   *   message) names it.
   * @throws {DecryptionError} When an end-to-end team's value does not open.
   * @throws {ConfigurationError} When the team is end-to-end and the token lacks its key part.
   * @throws {CvsmError} Another subclass for any other failure.
   */
  async get(name) {
    if (typeof name !== 'string') {
      throw new TypeError('get(name): name must be a string');
    }
    const environment = this.#config.environment;
    if (!SECRET_NAME_RE.test(name)) {
      throw new SecretNotFoundError(
        rules.MESSAGE_INVALID_SECRET_NAME.replace('%s', JSON.stringify(name)),
      );
    }
    const key = cacheKey(environment, name);
    const cached = this.#values.get(key);
    if (cached !== undefined) return cached;
    this.#liveStart();
    const mark = this.#mark();

    let read;
    try {
      read = await this.#readByName(name, environment);
    } catch (err) {
      if (err instanceof SecretNotFoundError || AFTER_NOT_FOUND.has(err)) throw err;
      const kept = this.#keptFor(this.#values, key, err);
      if (kept === undefined) throw err;
      this.#reportStale({ method: 'get', name, environment, error: err, age: kept.age }, `get\u0000${key}`);
      return kept.value;
    }
    this.#storeValue(name, read, mark);
    return read.value;
  }

  /**
   * Reads one secret from the server now, past the cache: the same request, errors, retries
   * and not-found listing as `get()`, but never answered from the cache nor with a kept value
   * (staleIfError does not apply: the caller asked for the current value). For the pattern "my
   * database login failed: fetch the credential again once". In the client's environment the
   * cache then holds the value read; another environment's value is returned, not cached.
   * @param {string} name The secret's name (case-sensitive).
   * @param {{ environment?: string }} [options] `environment`: another environment to read
   *   (default the client's).
   * @returns {Promise<string>} The secret's current value.
   * @throws {SecretNotFoundError} As `get()`.
   * @throws {CvsmError} Another subclass for any other failure, as `get()`.
   */
  async refresh(name, { environment } = {}) {
    if (typeof name !== 'string') {
      throw new TypeError('refresh(name): name must be a string');
    }
    const own = this.#config.environment;
    if (environment === undefined || environment === null) environment = own;
    if (typeof environment !== 'string' || environment === '') {
      throw new TypeError("refresh(name, {environment}): environment must be a non-empty string, or absent for the client's own");
    }
    if (!SECRET_NAME_RE.test(name)) {
      throw new SecretNotFoundError(
        rules.MESSAGE_INVALID_SECRET_NAME.replace('%s', JSON.stringify(name)),
      );
    }
    this.#liveStart();
    const mark = this.#mark();
    const read = await this.#readByName(name, environment);
    if (environment === own) this.#storeValue(name, read, mark);
    return read.value;
  }

  /**
   * Ends a live client's change stream (at once, its connection included) and resolves once it
   * has stopped. The client still reads afterwards, as a client without `live`. Without `live`
   * it does nothing. Safe to call more than once.
   * @returns {Promise<void>}
   */
  async close() {
    this.#closed = true;
    this.#latest = null;
    if (this.#live !== null) {
      await this.#live.close();
      await this.#transport.closeStream();
    }
  }

  /**
   * Reads every secret of the client's environment, from the cache when it holds a fresh
   * export, else with one request to the export. It also fills the cache `get()` reads. With
   * `staleIfError`, a failed refresh returns the kept export as `get()` does. With an
   * end-to-end team's token each value is opened as `get()` opens it.
   * @returns {Promise<Record<string, string>>} The secrets, name to value (a new object).
   * @throws {DecryptionError} When an end-to-end team's value does not open.
   * @throws {ConfigurationError} When the team is end-to-end and the token lacks its key part.
   * @throws {CvsmError} Another subclass for any other failure.
   */
  async getAll() {
    const environment = this.#config.environment;
    const cached = this.#exports.get(environment);
    if (cached !== undefined) return { ...cached };
    this.#liveStart();
    const mark = this.#mark();

    let values;
    try {
      const answer = await this.#transport.getJson(`${this.#teamPath()}/secrets/export`, {
        query: { format: 'json', environment },
        validate: SHAPES.export,
        configuration: { 404: WRONG_BASE_URL_OR_TEAM, 400: WRONG_ENVIRONMENT },
      });
      // An end-to-end team's export is {NAME: envelope}, marked by the header Cvsm-E2E: 1 (the
      // JSON has no room for a mark): each opens for its own name, with the key part only.
      if (this.#privateKey === null && answer.headers.get(rules.HEADER_E2E) === '1') {
        throw new ConfigurationError(KEY_PART_MISSING, { requestId: answer.requestId });
      }
      values =
        this.#privateKey === null
          ? { ...answer.body }
          : Object.fromEntries(
              await this.#open(Object.entries(answer.body), environment, answer.requestId, { all: true }),
            );
    } catch (err) {
      const kept = this.#keptFor(this.#exports, environment, err);
      if (kept === undefined) throw err;
      this.#reportStale(
        { method: 'getAll', name: null, environment, error: err, age: kept.age },
        `getAll\u0000${environment}`,
      );
      return { ...kept.value };
    }
    // A read a clearCache() or a change overtook stores nothing: what it got may be older.
    if (mark.generation === this.#generation && mark.stamp === this.#stamp) {
      this.#exports.set(environment, values);
      this.#warned.delete(`getAll\u0000${environment}`);
      for (const [name, value] of Object.entries(values)) {
        const key = cacheKey(environment, name);
        this.#values.set(key, value);
        this.#warned.delete(`get\u0000${key}`);
        const held = this.#latest?.get(name);
        if (held !== undefined) this.#versions.set(name, held);
        else this.#versions.delete(name);
      }
    }
    return { ...values };
  }

  /**
   * Copies `getAll()` into `process.env`. A variable that is already set is kept unless
   * `overwrite` is true. Before setting anything it checks every name it would set (a valid
   * variable name) and every value (no NUL character).
   * @param {{ overwrite?: boolean }} [options] `overwrite: true` replaces variables already set.
   * @returns {Promise<string[]>} The names it set, sorted.
   * @throws {ConfigurationError} Naming the secret whose name or value cannot be set; nothing is
   *   set then. As getAll(), when the team is end-to-end and the token lacks its key part.
   * @throws {CvsmError} Another subclass when the read fails.
   */
  async inject({ overwrite = false } = {}) {
    const values = await this.getAll();
    const names = Object.keys(values)
      .sort()
      .filter((name) => overwrite || process.env[name] === undefined);
    for (const name of names) {
      if (!ENV_NAME_RE.test(name)) {
        throw new ConfigurationError(
          `secret ${JSON.stringify(name)} cannot be put in the environment: not a valid variable name; nothing was set`,
        );
      }
      if (values[name].includes('\u0000')) {
        throw new ConfigurationError(
          `secret ${JSON.stringify(name)} cannot be put in the environment: its value holds a NUL character; nothing was set`,
        );
      }
    }
    for (const name of names) process.env[name] = values[name];
    return names;
  }

  /**
   * Forgets every cached value, the ones kept for `staleIfError` included, and an end-to-end
   * team's key, so that the next call asks the server again. An `AuthenticationError` or
   * `PermissionDeniedError` does the same.
   * @returns {void}
   */
  clearCache() {
    this.#values.clear();
    this.#exports.clear();
    this.#warned.clear();
    this.#teamKey = null;
    this.#teamKeyFetch = null;
    this.#versions.clear();
    this.#generation += 1;
  }

  /**
   * Returns the effective configuration without the token (what `JSON.stringify` prints), the
   * base URL with any user and password shown as `***` (`baseUrl` itself keeps them).
   * @returns {import('./index').ClientConfig} A new object each call.
   */
  toJSON() {
    return {
      baseUrl: displayUrl(this.baseUrl),
      team: this.team,
      environment: this.environment,
      cacheTtl: this.cacheTtl,
      timeout: this.timeout,
      maxRetries: this.maxRetries,
      staleIfError: this.staleIfError,
      live: this.live,
      caFile: this.caFile,
    };
  }

  [util.inspect.custom](depth, options, inspect = util.inspect) {
    if (depth < 0) return '[Client]';
    return `Client ${inspect(this.toJSON(), { ...options, depth: options.depth === null ? null : options.depth - 1 })}`;
  }

  /**
   * Reads `name` by name in `environment` and returns `{value, version}` (the version the answer
   * says, or null), opening an end-to-end team's envelope. A 404 is followed by the listing,
   * which decides: the not-found error (with a suggestion) or a configuration error.
   */
  async #readByName(name, environment) {
    let answer;
    try {
      answer = await this.#transport.getJson(
        `${this.#teamPath()}/secrets/by-name/${encodeURIComponent(name)}`,
        {
          query: { environment },
          validate: SHAPES.value,
          configuration: { 400: WRONG_ENVIRONMENT },
        },
      );
    } catch (err) {
      if (err instanceof SecretNotFoundError && err.status === 404) {
        // The server said 404: a missing secret, or a wrong team or base URL. The listing
        // decides; a kept value never answers it, nor a failure of the listing itself.
        let decided;
        try {
          decided = await this.#explainNotFound(environment, name, err.requestId);
        } catch (listingError) {
          AFTER_NOT_FOUND.add(listingError);
          throw listingError;
        }
        throw decided;
      }
      throw err;
    }
    // The server marks an end-to-end team's secret (`secret.e2e`).
    const sealed = answer.body.secret?.e2e === true || answer.body.e2e === true;
    if (sealed && this.#privateKey === null) {
      throw new ConfigurationError(KEY_PART_MISSING, { requestId: answer.requestId });
    }
    let value = answer.body.value;
    if (this.#privateKey !== null) {
      // A token with a key part is an end-to-end team's: every value it reads must open.
      [[, value]] = await this.#open([[name, value]], environment, answer.requestId);
    }
    const version = Number.isSafeInteger(answer.body.secret.version) ? answer.body.secret.version : null;
    return { value, version };
  }

  /** Opens the change stream of a live client, once, at its first read (never after close()). */
  #liveStart() {
    if (this.#live !== null && !this.#closed) this.#live.start();
  }

  /** Returns when a fetch begins: it stores nothing if the cache is emptied, or its name changes, before it ends. */
  #mark() {
    return { generation: this.#generation, stamp: this.#stamp };
  }

  /**
   * Stores the value `read` ({value, version}) of `name` in the client's environment, fetched
   * by a call that began at `mark`, unless the cache was emptied meanwhile, or the stream
   * announced a newer version (or, the version unknown, a change of the name) meanwhile.
   */
  #storeValue(name, { value, version }, mark) {
    if (mark.generation !== this.#generation) return;
    const latest = this.#latest?.get(name);
    if (version !== null && latest !== undefined) {
      if (version < latest) return;
    } else if ((this.#changed.get(name) ?? 0) > mark.stamp) {
      return;
    }
    const key = cacheKey(this.#config.environment, name);
    this.#values.set(key, value);
    this.#warned.delete(`get\u0000${key}`);
    const held = version ?? latest;
    if (held !== undefined) this.#versions.set(name, held);
    else this.#versions.delete(name);
  }

  /**
   * Takes the stream's snapshot (every name's current version, on each connect): a cached value
   * whose version is unknown or differs stops being fresh (kept for staleIfError), and so does
   * the getAll result unless every name of it is current and no name is missing from it.
   */
  #onSnapshot(versions) {
    const before = this.#latest;
    this.#latest = new Map(versions);
    this.#stamp += 1;
    for (const name of new Set([...versions.keys(), ...(before?.keys() ?? [])])) {
      if (before === null || before.get(name) !== versions.get(name)) this.#changed.set(name, this.#stamp);
    }
    const environment = this.#config.environment;
    const prefix = cacheKey(environment, '');
    const dropped = new Set();
    for (const key of this.#values.freshKeys()) {
      if (!key.startsWith(prefix)) continue;
      const name = key.slice(prefix.length);
      const held = this.#versions.get(name);
      if (held === undefined || held !== versions.get(name)) {
        this.#expire(name);
        dropped.add(name);
      }
    }
    const all = this.#exports.get(environment);
    if (all !== undefined) {
      const names = Object.keys(all);
      if (names.length !== versions.size || names.some((name) => dropped.has(name) || !versions.has(name))) {
        this.#exports.expire(environment);
      }
    }
  }

  /**
   * Takes a `change`: `name` is now at `version` (null: deleted). Its cached value stops being
   * fresh unless it already holds that version; the getAll result always does.
   */
  #onChange(name, version) {
    if (this.#latest !== null) {
      if (version === null) this.#latest.delete(name);
      else this.#latest.set(name, version);
    }
    this.#stamp += 1;
    this.#exports.expire(this.#config.environment);
    const key = cacheKey(this.#config.environment, name);
    if (version !== null && this.#values.has(key) && this.#versions.get(name) === version) return;
    this.#changed.set(name, this.#stamp);
    this.#expire(name);
  }

  /** Makes the cached value of `name` stop being fresh (it stays kept for staleIfError). */
  #expire(name) {
    this.#values.expire(cacheKey(this.#config.environment, name));
    this.#versions.delete(name);
  }

  /**
   * Opens the sealed values `entries` ([name, envelope] pairs read from `environment`; `all` for
   * a getAll) with the team key and returns them as [name, value] pairs, in order. The key is
   * fetched (and verified against the token's pin) when none is held; when an envelope is under
   * a key version above the held key, it is fetched once more (a re-keyed team), by this read
   * itself when the fetch it joined does not bring that version. An envelope under an older key
   * version opens with the key reached through the verified links. Each envelope is opened for the environment and the name that were
   * asked for. Any failure to open is a DecryptionError naming the secret (or the environment,
   * when the team key itself does not open for a getAll), with the request id of the answer that
   * failed.
   */
  async #open(entries, environment, requestId, { all = false } = {}) {
    const secret = (name) => `secret ${JSON.stringify(name)} in ${environment}`;
    const failure = (name, reason) =>
      new DecryptionError(`${secret(name)} cannot be opened: ${reason}`, { requestId });
    const parsed = entries.map(([name, envelope]) => {
      try {
        return [name, parseEnvelope(envelope)];
      } catch (err) {
        throw err instanceof DecryptionError ? failure(name, err.message) : err;
      }
    });
    if (parsed.length === 0) return [];
    const fits = (key) => key !== null && parsed.every(([, parts]) => parts.keyVersion <= key.keyVersion);
    let held = this.#teamKey;
    if (!fits(held)) {
      try {
        // A fetch already in flight may have begun before a re-key these envelopes show: when
        // the key it brings does not open them, this read fetches the key itself, once.
        const joined = this.#teamKeyFetch !== null;
        held = await this.#teamKeyOnce();
        if (joined && !fits(held)) held = await this.#teamKeyOnce();
      } catch (err) {
        if (!(err instanceof DecryptionError)) throw err;
        const what = all ? `the secrets of ${environment}` : secret(entries[0][0]);
        throw new DecryptionError(`${what} cannot be opened: ${err.message}`, {
          requestId: err.requestId,
        });
      }
    }
    return parsed.map(([name, parts]) => {
      if (parts.keyVersion > held.keyVersion) {
        throw failure(
          name,
          `it is sealed under key version ${parts.keyVersion}, the team key this token holds ` +
            `is version ${held.keyVersion}`,
        );
      }
      try {
        const key = keyFor(held, parts.keyVersion);
        return [name, openValue(parts, key, { teamId: held.teamId, environment, name })];
      } catch (err) {
        throw err instanceof DecryptionError ? failure(name, err.message) : err;
      }
    });
  }

  /**
   * Returns the team key `{teamId, keyVersion, key}` fetched anew, sharing one request between
   * the reads that ask at the same time, and keeps it until clearCache().
   */
  #teamKeyOnce() {
    if (this.#teamKeyFetch === null) {
      const generation = this.#generation;
      const fetching = this.#fetchTeamKey().then(
        (held) => {
          if (generation === this.#generation) {
            this.#teamKey = held;
            this.#teamKeyFetch = null;
          }
          return held;
        },
        (err) => {
          if (generation === this.#generation) this.#teamKeyFetch = null;
          throw err;
        },
      );
      this.#teamKeyFetch = fetching;
    }
    return this.#teamKeyFetch;
  }

  /**
   * Asks `GET /teams/{team}/e2e/key` for the team key wrapped to this token, unwraps it with the
   * token's key part (bound to the answer's team id and key version) and walks the answer's
   * links down to the token's pin, whose commitment must match (docs/e2e.md, format 2). Any
   * failure is a DecryptionError: a key the server chose, a missing or altered link, a team
   * rolled back below the pin.
   */
  async #fetchTeamKey() {
    const answer = await this.#transport.getJson(`${this.#teamPath()}/e2e/key`, {
      validate: SHAPES.teamKey,
      configuration: { 404: WRONG_BASE_URL_OR_TEAM, 400: NOT_END_TO_END },
    });
    const { team_id: teamId, key_version: keyVersion, wrapped_key: wrapped } = answer.body;
    try {
      const links = linksOf(answer.body.links);
      const current = unwrapTeamKey(wrapped, teamId, keyVersion, this.#privateKey);
      const keys = verifyChain(current, keyVersion, teamId, links, this.#pin);
      return { teamId, keyVersion, keys, links };
    } catch (err) {
      if (!(err instanceof DecryptionError)) throw err;
      throw new DecryptionError(
        `the team key sent for this token (key version ${keyVersion}) is not one a team member ` +
          `made for it: ${err.message}`,
        { requestId: answer.requestId },
      );
    }
  }

  /** The path of the configured team, id or slug, percent-encoded. */
  #teamPath() {
    return `/teams/${encodeURIComponent(this.#config.team)}`;
  }

  /**
   * #explainNotFound asks the listing why the by-name read answered 404 and returns the
   * SecretNotFoundError to throw (status 404, the by-name answer's request id, and the name that
   * differs only in case as the suggestion). A 404 or 400 to the listing means a wrong base URL,
   * team or environment: that ConfigurationError, like any other error of the listing, is
   * thrown from here.
   */
  async #explainNotFound(environment, name, requestId) {
    const listing = await this.#transport.getJson(`${this.#teamPath()}/secrets`, {
      query: { environment, search: name },
      validate: SHAPES.listing,
      configuration: { 404: WRONG_BASE_URL_OR_TEAM, 400: WRONG_ENVIRONMENT },
    });
    const lower = name.toLowerCase();
    const similar = listing.body.secrets.find(
      (s) =>
        s &&
        typeof s.name === 'string' &&
        s.name !== name &&
        s.name.toLowerCase() === lower &&
        (s.environment === undefined || s.environment === environment),
    );
    let message = `secret ${JSON.stringify(name)} not found in ${environment}`;
    if (similar) message += rules.MESSAGE_DID_YOU_MEAN.replace('%s', similar.name);
    return new SecretNotFoundError(message, {
      status: 404,
      requestId,
      suggestion: similar ? similar.name : null,
    });
  }

  /**
   * Returns the kept `{value, age}` under `key` of `cache` when `err` may be answered
   * with it (rule R14: staleIfError is on, the error is a network error, a 5xx or a 429, and
   * the value is younger than cacheTtl + staleIfError), else undefined.
   */
  #keptFor(cache, key, err) {
    if (this.#config.staleIfError <= 0 || !servesStale(err)) return undefined;
    return cache.kept(key);
  }

  /**
   * Tells that a stale value is being served: a process warning the first time for
   * `warnKey` since it was last read fresh (it names the secret and the error, never the
   * value), then the caller's onStale hook, each time. An exception the hook throws rejects the
   * call.
   */
  #reportStale(event, warnKey) {
    if (!this.#warned.has(warnKey)) {
      this.#warned.add(warnKey);
      const what =
        event.name === null
          ? `the secrets of ${event.environment} (getAll)`
          : `secret ${JSON.stringify(event.name)} in ${event.environment}`;
      process.emitWarning(
        `cvsm: serving a stale value of ${what}, fetched ${Math.round(event.age)} s ago: ` +
          `the refresh failed with ${event.error.name} (${event.error.message})`,
        STALE_WARNING,
      );
    }
    if (this.#onStale !== null) this.#onStale(Object.freeze({ ...event }));
  }
}

module.exports = { Client, STALE_WARNING };
