'use strict';
/**
 * client: the cvsm Client. It reads secrets of one team and environment, caches them for
 * cacheTtl seconds and writes them into process.env on request.
 */

const util = require('node:util');
const { resolveConfig } = require('./config');
const { TtlCache } = require('./cache');
const { Transport } = require('./transport');
const { ConfigurationError, SecretNotFoundError } = require('./errors');

const UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
/** A valid secret name: what get() asks the server for. */
const SECRET_NAME_RE = /^[A-Za-z_][A-Za-z0-9_]{0,254}$/;
/** A name inject() can put in the process environment. */
const ENV_NAME_RE = /^[A-Za-z_][A-Za-z0-9_]*$/;

/** The hints of the configuration errors the server's answers point to (rule R9). */
const WRONG_BASE_URL = 'check the base URL (CVSM_BASE_URL, it includes /api/v1)';
const WRONG_BASE_URL_OR_TEAM = 'check the base URL (CVSM_BASE_URL, it includes /api/v1) and the team (CVSM_TEAM)';
const WRONG_ENVIRONMENT = 'check the environment (CVSM_ENVIRONMENT)';

function cacheKey(environment, name) {
  return `${environment}\u0000${name}`;
}

/** The shapes the answers promise (rule R3); anything else is an unreadable answer. */
const isObject = (body) => body !== null && typeof body === 'object' && !Array.isArray(body);
const SHAPES = {
  teams: (body) => isObject(body) && Array.isArray(body.teams),
  listing: (body) => isObject(body) && Array.isArray(body.secrets),
  value: (body) => isObject(body) && typeof body.value === 'string',
  export: (body) => isObject(body) && Object.values(body).every((v) => typeof v === 'string'),
};

/**
 * Client reads secrets from a cvsm server. Options (each falls back to its variable, read when
 * the client is created): `token` (CVSM_TOKEN), `baseUrl` (CVSM_BASE_URL, including /api/v1),
 * `team` (CVSM_TEAM, a team id or slug), `environment` (CVSM_ENVIRONMENT, default
 * "production"), `cacheTtl` (CVSM_CACHE_TTL, seconds, default 30, 0 disables), `timeout`
 * (CVSM_TIMEOUT, seconds per attempt, default 10), `maxRetries` (CVSM_MAX_RETRIES, default 2),
 * `caFile` (CVSM_CA_FILE, a PEM bundle trusted instead of the system store) and `fetch` (a
 * fetch function that replaces the built-in transport). The proxy variables (http_proxy,
 * https_proxy, no_proxy and their upper-case forms) are read at the same time.
 * Throws ConfigurationError when an option or variable is missing or invalid.
 */
class Client {
  #config;
  #transport;
  #values;
  #exports;
  #teamId = null;
  #teamLookup = null;

  constructor(options = {}) {
    const { token, ca, fetch, proxy, noProxy, ...config } = resolveConfig(options, process.env);
    this.#config = Object.freeze(config);
    this.#values = new TtlCache(config.cacheTtl);
    this.#exports = new TtlCache(config.cacheTtl);
    this.#transport = new Transport({
      token,
      baseUrl: config.baseUrl,
      timeout: config.timeout,
      maxRetries: config.maxRetries,
      fetch,
      proxy,
      noProxy,
      ca,
      onAuthError: () => this.clearCache(),
    });
    if (UUID_RE.test(config.team)) this.#teamId = config.team;
  }

  /** baseUrl is the API root the client calls, without a trailing slash. */
  get baseUrl() {
    return this.#config.baseUrl;
  }

  /** team is the team id or slug as configured. */
  get team() {
    return this.#config.team;
  }

  /** environment is the environment the client reads from. */
  get environment() {
    return this.#config.environment;
  }

  /** cacheTtl is how many seconds a fetched value is reused; 0 means no cache. */
  get cacheTtl() {
    return this.#config.cacheTtl;
  }

  /** timeout is the limit in seconds for each HTTP attempt, body included. */
  get timeout() {
    return this.#config.timeout;
  }

  /** maxRetries is how many more attempts a GET gets after a network error or 502/503/504. */
  get maxRetries() {
    return this.#config.maxRetries;
  }

  /** caFile is the path of the PEM bundle trusted instead of the system store, or null. */
  get caFile() {
    return this.#config.caFile;
  }

  /**
   * get returns the value of the secret `name` (case-sensitive) in the client's environment,
   * from the cache when it holds a live entry. Throws SecretNotFoundError, without a request,
   * when `name` is not a valid secret name, and when it is absent; when a secret differs only
   * in case, the error's `suggestion` (and message) names it.
   */
  async get(name) {
    if (typeof name !== 'string') {
      throw new TypeError('get(name): name must be a string');
    }
    const environment = this.#config.environment;
    if (!SECRET_NAME_RE.test(name)) {
      throw new SecretNotFoundError(
        `${JSON.stringify(name)} is not a valid secret name ` +
          '(a letter or _, then letters, digits or _, at most 255 characters)',
      );
    }
    const key = cacheKey(environment, name);
    const cached = this.#values.get(key);
    if (cached !== undefined) return cached;

    const teamPath = `/teams/${encodeURIComponent(await this.#resolveTeam())}`;
    const listing = await this.#transport.getJson(`${teamPath}/secrets`, {
      query: { environment, search: name },
      validate: SHAPES.listing,
      configuration: { 404: WRONG_BASE_URL_OR_TEAM, 400: WRONG_ENVIRONMENT },
    });

    const candidates = listing.body.secrets.filter(
      (s) =>
        s &&
        typeof s.name === 'string' &&
        (s.environment === undefined || s.environment === environment),
    );
    const match = candidates.find((s) => s.name === name);
    if (!match) {
      const lower = name.toLowerCase();
      const similar = candidates.find((s) => s.name.toLowerCase() === lower);
      let message = `secret ${JSON.stringify(name)} not found in ${environment}`;
      if (similar) message += `; did you mean ${JSON.stringify(similar.name)}?`;
      throw new SecretNotFoundError(message, {
        requestId: listing.requestId,
        suggestion: similar ? similar.name : null,
      });
    }

    const { body } = await this.#transport.getJson(
      `${teamPath}/secrets/${encodeURIComponent(String(match.id))}`,
      { validate: SHAPES.value },
    );
    this.#values.set(key, body.value);
    return body.value;
  }

  /**
   * getAll returns every secret of the client's environment as an object name -> value, from
   * the cache when it holds a live export. It also fills the cache used by get().
   */
  async getAll() {
    const environment = this.#config.environment;
    const cached = this.#exports.get(environment);
    if (cached !== undefined) return { ...cached };

    const path = `/teams/${encodeURIComponent(await this.#resolveTeam())}/secrets/export`;
    const { body } = await this.#transport.getJson(path, {
      query: { format: 'json', environment },
      validate: SHAPES.export,
      configuration: { 404: WRONG_BASE_URL_OR_TEAM, 400: WRONG_ENVIRONMENT },
    });
    const values = { ...body };
    this.#exports.set(environment, values);
    for (const [name, value] of Object.entries(values)) {
      this.#values.set(cacheKey(environment, name), value);
    }
    return { ...values };
  }

  /**
   * inject copies getAll() into process.env. A variable that is already set is kept unless
   * `overwrite` is true. Before setting anything it checks every name it would set (a valid
   * variable name) and every value (no NUL character); one that fails is a ConfigurationError
   * naming the secret, and nothing is set. Returns the names it set, sorted.
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

  /** clearCache forgets every cached value, so the next call asks the server again. */
  clearCache() {
    this.#values.clear();
    this.#exports.clear();
  }

  /** toJSON returns the effective configuration without the token. */
  toJSON() {
    return {
      baseUrl: this.baseUrl,
      team: this.team,
      environment: this.environment,
      cacheTtl: this.cacheTtl,
      timeout: this.timeout,
      maxRetries: this.maxRetries,
      caFile: this.caFile,
    };
  }

  [util.inspect.custom](depth, options, inspect = util.inspect) {
    if (depth < 0) return '[Client]';
    return `Client ${inspect(this.toJSON(), { ...options, depth: options.depth === null ? null : options.depth - 1 })}`;
  }

  /** #resolveTeam returns the team id, looking a slug up through GET /teams once per client. */
  async #resolveTeam() {
    if (this.#teamId !== null) return this.#teamId;
    this.#teamLookup ??= this.#lookupTeam().finally(() => {
      this.#teamLookup = null;
    });
    return this.#teamLookup;
  }

  async #lookupTeam() {
    const { body, requestId } = await this.#transport.getJson('/teams', {
      validate: SHAPES.teams,
      configuration: { 404: WRONG_BASE_URL },
    });
    const slug = this.#config.team;
    const team = body.teams.find((t) => t && t.slug === slug && typeof t.id === 'string');
    if (!team) {
      throw new ConfigurationError(
        `team ${JSON.stringify(slug)} (CVSM_TEAM) matches none of the token's teams`,
        { requestId },
      );
    }
    this.#teamId = team.id;
    return team.id;
  }
}

module.exports = { Client };
