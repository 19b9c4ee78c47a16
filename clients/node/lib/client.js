'use strict';
/**
 * client: the cvsm Client. It reads secrets of one team and environment, caches them for
 * cacheTtl seconds and writes them into process.env on request.
 */

const util = require('node:util');
const { resolveConfig } = require('./config');
const { TtlCache } = require('./cache');
const { Transport } = require('./transport');
const { ConfigurationError, NetworkError, SecretNotFoundError } = require('./errors');

const UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

function cacheKey(environment, name) {
  return `${environment}\u0000${name}`;
}

function unreadable(what) {
  return new NetworkError(`${what} returned an unreadable response`);
}

/**
 * Client reads secrets from a cvsm server. Options (each falls back to its variable):
 * `token` (CVSM_TOKEN), `baseUrl` (CVSM_BASE_URL, including /api/v1), `team` (CVSM_TEAM, a
 * team id or slug), `environment` (CVSM_ENVIRONMENT, default "production"), `cacheTtl`
 * (CVSM_CACHE_TTL, seconds, default 30, 0 disables), `timeout` (seconds per attempt, default
 * 10) and `maxRetries` (default 2). Throws ConfigurationError when one is missing or invalid.
 */
class Client {
  #config;
  #transport;
  #values;
  #exports;
  #teamId = null;
  #teamLookup = null;

  constructor(options = {}) {
    const { token, ...config } = resolveConfig(options, process.env);
    this.#config = Object.freeze(config);
    this.#values = new TtlCache(config.cacheTtl);
    this.#exports = new TtlCache(config.cacheTtl);
    this.#transport = new Transport({
      token,
      baseUrl: config.baseUrl,
      timeout: config.timeout,
      maxRetries: config.maxRetries,
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

  /** timeout is the limit in seconds for each HTTP attempt. */
  get timeout() {
    return this.#config.timeout;
  }

  /** maxRetries is how many more attempts a GET gets after a network error or 502/503/504. */
  get maxRetries() {
    return this.#config.maxRetries;
  }

  /**
   * get returns the value of the secret `name` (case-sensitive) in the client's environment,
   * from the cache when it holds a live entry. Throws SecretNotFoundError when it is absent;
   * when a secret differs only in case, the message suggests its name.
   */
  async get(name) {
    if (typeof name !== 'string' || name === '') {
      throw new TypeError('get(name): name must be a non-empty string');
    }
    const environment = this.#config.environment;
    const key = cacheKey(environment, name);
    const cached = this.#values.get(key);
    if (cached !== undefined) return cached;

    const teamPath = `/teams/${encodeURIComponent(await this.#resolveTeam())}`;
    const listPath = `${teamPath}/secrets`;
    const list = await this.#transport.getJson(listPath, { environment, search: name });
    if (!list || !Array.isArray(list.secrets)) throw unreadable(`GET ${listPath}`);

    const candidates = list.secrets.filter(
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
      throw new SecretNotFoundError(message);
    }

    const secretPath = `${teamPath}/secrets/${encodeURIComponent(String(match.id))}`;
    const body = await this.#transport.getJson(secretPath);
    if (!body || typeof body.value !== 'string') throw unreadable(`GET ${secretPath}`);
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
    const body = await this.#transport.getJson(path, { format: 'json', environment });
    if (
      !body ||
      typeof body !== 'object' ||
      Array.isArray(body) ||
      !Object.values(body).every((v) => typeof v === 'string')
    ) {
      throw unreadable(`GET ${path}`);
    }
    const values = { ...body };
    this.#exports.set(environment, values);
    for (const [name, value] of Object.entries(values)) {
      this.#values.set(cacheKey(environment, name), value);
    }
    return { ...values };
  }

  /**
   * inject copies getAll() into process.env. A variable that is already set is kept unless
   * `overwrite` is true. Returns the names it set, sorted.
   */
  async inject({ overwrite = false } = {}) {
    const values = await this.getAll();
    const names = [];
    for (const name of Object.keys(values).sort()) {
      if (!overwrite && process.env[name] !== undefined) continue;
      process.env[name] = values[name];
      names.push(name);
    }
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
    const body = await this.#transport.getJson('/teams');
    if (!body || !Array.isArray(body.teams)) throw unreadable('GET /teams');
    const slug = this.#config.team;
    const team = body.teams.find((t) => t && t.slug === slug && typeof t.id === 'string');
    if (!team) {
      throw new ConfigurationError(
        `team ${JSON.stringify(slug)} (CVSM_TEAM) matches none of the token's teams`,
      );
    }
    this.#teamId = team.id;
    return team.id;
  }
}

module.exports = { Client };
