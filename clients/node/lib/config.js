'use strict';
/**
 * config: turns the options given to `new Client()` and the CVSM_* environment variables into
 * one validated configuration. An explicit option wins over its variable.
 */

const { ConfigurationError } = require('./errors');

const DEFAULT_ENVIRONMENT = 'production';
const DEFAULT_CACHE_TTL = 30;
const DEFAULT_TIMEOUT = 10;
const DEFAULT_MAX_RETRIES = 2;

const KNOWN_OPTIONS = [
  'token',
  'baseUrl',
  'team',
  'environment',
  'cacheTtl',
  'timeout',
  'maxRetries',
];

/** given reports whether an option or variable holds a usable value (unset and '' do not). */
function given(value) {
  return value !== undefined && value !== null && value !== '';
}

/** pickString returns the explicit string option, else the variable, else the fallback. */
function pickString(options, key, env, variable, fallback) {
  const explicit = options[key];
  if (given(explicit)) {
    if (typeof explicit !== 'string') {
      throw new ConfigurationError(`option ${key} must be a string`);
    }
    return explicit;
  }
  if (variable !== null && given(env[variable])) return env[variable];
  return fallback;
}

/**
 * resolveConfig returns `{token, baseUrl, team, environment, cacheTtl, timeout, maxRetries}`
 * from `options` and `env`, or throws ConfigurationError naming what is missing or invalid.
 */
function resolveConfig(options = {}, env = process.env) {
  if (options === null || typeof options !== 'object' || Array.isArray(options)) {
    throw new ConfigurationError('options must be an object');
  }
  for (const key of Object.keys(options)) {
    if (!KNOWN_OPTIONS.includes(key)) {
      throw new ConfigurationError(
        `unknown option ${JSON.stringify(key)}; expected one of ${KNOWN_OPTIONS.join(', ')}`,
      );
    }
  }

  const token = pickString(options, 'token', env, 'CVSM_TOKEN', null);
  if (token === null) throw new ConfigurationError('CVSM_TOKEN is not set');

  let baseUrl = pickString(options, 'baseUrl', env, 'CVSM_BASE_URL', null);
  if (baseUrl === null) throw new ConfigurationError('CVSM_BASE_URL is not set');
  baseUrl = baseUrl.trim().replace(/\/+$/, '');
  let parsed;
  try {
    parsed = new URL(baseUrl);
  } catch {
    throw new ConfigurationError('base URL (CVSM_BASE_URL) is not a valid URL');
  }
  if (parsed.protocol !== 'http:' && parsed.protocol !== 'https:') {
    throw new ConfigurationError('base URL (CVSM_BASE_URL) must use http or https');
  }

  const team = pickString(options, 'team', env, 'CVSM_TEAM', null);
  if (team === null) throw new ConfigurationError('CVSM_TEAM is not set');

  const environment = pickString(
    options,
    'environment',
    env,
    'CVSM_ENVIRONMENT',
    DEFAULT_ENVIRONMENT,
  );

  let cacheTtl = DEFAULT_CACHE_TTL;
  if (given(options.cacheTtl)) {
    if (!Number.isInteger(options.cacheTtl) || options.cacheTtl < 0) {
      throw new ConfigurationError('option cacheTtl must be a non-negative integer (seconds)');
    }
    cacheTtl = options.cacheTtl;
  } else if (given(env.CVSM_CACHE_TTL)) {
    const text = env.CVSM_CACHE_TTL.trim();
    if (!/^[0-9]+$/.test(text) || !Number.isSafeInteger(Number(text))) {
      throw new ConfigurationError('CVSM_CACHE_TTL must be a non-negative integer (seconds)');
    }
    cacheTtl = Number(text);
  }

  let timeout = DEFAULT_TIMEOUT;
  if (given(options.timeout)) {
    if (typeof options.timeout !== 'number' || !Number.isFinite(options.timeout) || options.timeout <= 0) {
      throw new ConfigurationError('option timeout must be a positive number (seconds)');
    }
    timeout = options.timeout;
  }

  let maxRetries = DEFAULT_MAX_RETRIES;
  if (given(options.maxRetries)) {
    if (!Number.isInteger(options.maxRetries) || options.maxRetries < 0) {
      throw new ConfigurationError('option maxRetries must be a non-negative integer');
    }
    maxRetries = options.maxRetries;
  }

  return { token, baseUrl, team, environment, cacheTtl, timeout, maxRetries };
}

module.exports = {
  resolveConfig,
  DEFAULT_ENVIRONMENT,
  DEFAULT_CACHE_TTL,
  DEFAULT_TIMEOUT,
  DEFAULT_MAX_RETRIES,
};
