'use strict';
/**
 * config: turns the options given to `new Client()` and the environment (CVSM_* variables, the
 * proxy variables) into one validated configuration, read once when the client is created. An
 * explicit option wins over its variable; an empty variable counts as unset.
 */

const fs = require('node:fs');
const { X509Certificate } = require('node:crypto');
const { ConfigurationError } = require('./errors');
const { splitToken } = require('./e2e');
const rules = require('./rules');

const DEFAULT_ENVIRONMENT = rules.DEFAULT_ENVIRONMENT;
const DEFAULT_CACHE_TTL = rules.DEFAULT_CACHE_TTL_SECONDS;
const DEFAULT_TIMEOUT = rules.DEFAULT_TIMEOUT_SECONDS;
const DEFAULT_MAX_RETRIES = rules.DEFAULT_MAX_RETRIES;
const DEFAULT_STALE_IF_ERROR = rules.DEFAULT_STALE_IF_ERROR_SECONDS;

const KNOWN_OPTIONS = [
  'token',
  'baseUrl',
  'team',
  'environment',
  'cacheTtl',
  'timeout',
  'maxRetries',
  'caFile',
  'fetch',
  'staleIfError',
  'onStale',
  'live',
];

/** The message of a missing token, base URL or team (`variable` is not set). */
function notSet(variable) {
  return rules.MESSAGE_NOT_SET.replace('%s', variable);
}

/** The accepted spellings of CVSM_LIVE (rule R16), any case. */
const LIVE_ON = new Set(rules.LIVE_TRUE_WORDS);
const LIVE_OFF = new Set(rules.LIVE_FALSE_WORDS);

/** Returns `live`: the option when given (a boolean), else CVSM_LIVE, else false. */
function pickLive(options, env) {
  if (given(options.live)) {
    if (typeof options.live !== 'boolean') {
      throw new ConfigurationError('option live must be true or false');
    }
    return options.live;
  }
  if (given(env.CVSM_LIVE)) {
    const text = env.CVSM_LIVE.trim().toLowerCase();
    if (LIVE_ON.has(text)) return true;
    if (LIVE_OFF.has(text)) return false;
    throw new ConfigurationError('CVSM_LIVE must be 1 or 0 (or true/false, yes/no, on/off)');
  }
  return false;
}

/** The proxy variables for each scheme of the base URL, the first one set wins. */
const PROXY_VARIABLES = {
  'http:': ['http_proxy', 'HTTP_PROXY'],
  'https:': ['https_proxy', 'HTTPS_PROXY'],
};
const NO_PROXY_VARIABLES = ['no_proxy', 'NO_PROXY'];

/** Reports whether an option or variable holds a usable value (unset and '' do not). */
function given(value) {
  return value !== undefined && value !== null && value !== '';
}

/** Returns the explicit string option, else the variable, else the fallback. */
function pickString(options, key, env, variable, fallback, normalise = (s) => s) {
  const explicit = options[key];
  if (given(explicit)) {
    if (typeof explicit !== 'string') {
      throw new ConfigurationError(`option ${key} must be a string`);
    }
    const value = normalise(explicit);
    if (given(value)) return value;
  }
  if (given(env[variable])) {
    const value = normalise(env[variable]);
    if (given(value)) return value;
  }
  return fallback;
}

/** Removes leading and trailing spaces, tabs, CR and LF (a token read from a file). */
function trimToken(text) {
  return text.replace(/^[ \t\r\n]+|[ \t\r\n]+$/g, '');
}

/** VISIBLE_ASCII matches a token made only of `!` to `~`. */
const VISIBLE_ASCII = /^[!-~]+$/;

/**
 * Returns the explicit numeric option, else the variable parsed by `pattern`, else
 * the fallback; `valid` decides what is acceptable and `what` describes it in the error.
 */
function pickNumber(options, key, env, variable, fallback, { pattern, valid, what }) {
  if (given(options[key])) {
    const value = options[key];
    if (typeof value !== 'number' || !valid(value)) {
      throw new ConfigurationError(`option ${key} must be ${what}`);
    }
    return value;
  }
  if (given(env[variable])) {
    const text = env[variable].trim();
    const value = Number(text);
    if (!pattern.test(text) || !valid(value)) {
      throw new ConfigurationError(`${variable} must be ${what}`);
    }
    return value;
  }
  return fallback;
}

const WHOLE = /^[0-9]+$/;
const DECIMAL = /^(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)$/;
const isCount = (n) => Number.isSafeInteger(n) && n >= 0;
const isPositive = (n) => Number.isFinite(n) && n > 0;

/**
 * Reads a PEM bundle and checks it holds at least one certificate, every one of them
 * readable. Any failure is a ConfigurationError naming the source and the path.
 */
function readCaFile(path, source) {
  let pem;
  try {
    pem = fs.readFileSync(path, 'utf8');
  } catch (err) {
    throw new ConfigurationError(
      `${source}: cannot read the CA bundle ${JSON.stringify(path)} (${err.code || err.message})`,
      { cause: err },
    );
  }
  const blocks = pem.match(/-----BEGIN CERTIFICATE-----[\s\S]*?-----END CERTIFICATE-----/g) || [];
  if (blocks.length === 0) {
    throw new ConfigurationError(
      `${source}: ${JSON.stringify(path)} holds no PEM certificate`,
    );
  }
  for (const block of blocks) {
    try {
      new X509Certificate(block); // eslint-disable-line no-new
    } catch (err) {
      throw new ConfigurationError(
        `${source}: ${JSON.stringify(path)} holds a certificate that cannot be read`,
        { cause: err },
      );
    }
  }
  return pem;
}

/**
 * Returns the proxy for a base URL of the given scheme, `{url, variable}`, from
 * http_proxy/HTTP_PROXY (http) or https_proxy/HTTPS_PROXY (https), or null when none is set.
 * A value without a scheme means http://. The URL may hold credentials, so an error names the
 * variable only.
 */
function proxyFromEnv(protocol, env) {
  const variable = PROXY_VARIABLES[protocol].find((v) => given(env[v]));
  if (variable === undefined) return null;
  const text = env[variable].trim();
  const withScheme = /^[A-Za-z][A-Za-z0-9+.-]*:\/\//.test(text) ? text : `http://${text}`;
  let parsed;
  try {
    parsed = new URL(withScheme);
  } catch {
    throw new ConfigurationError(`${variable} is not a valid proxy URL`);
  }
  if ((parsed.protocol !== 'http:' && parsed.protocol !== 'https:') || !parsed.hostname) {
    throw new ConfigurationError(`${variable} must be an http:// or https:// proxy URL`);
  }
  return { url: parsed.href, variable };
}

/**
 * Returns `{token, privateKey, pin, baseUrl, team, environment, cacheTtl, timeout, maxRetries,
 * staleIfError, live, caFile, ca, onStale, fetch, proxy, noProxy}` from `options` and `env`, or
 * throws ConfigurationError naming what is missing or invalid. `token` is the API token the
 * server knows (the part before the dot of an end-to-end team's token), `privateKey` the
 * token's X25519 key part as a KeyObject (or null), `pin` its pinned key version and commitment
 * `{keyVersion, commitment}` (or null). `ca` is the PEM text of the CA
 * bundle (or null), `onStale` the caller's stale hook (or null), `proxy` the proxy for the base
 * URL (or null), `noProxy` the no_proxy list ('' when unset).
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

  const token = pickString(options, 'token', env, rules.ENV_TOKEN, null, trimToken);
  if (token === null) throw new ConfigurationError(notSet(rules.ENV_TOKEN));
  if (!VISIBLE_ASCII.test(token)) {
    throw new ConfigurationError(
      'token (CVSM_TOKEN) holds a character that is not visible ASCII: a control character, ' +
        'inner whitespace or a non-ASCII character',
    );
  }
  // An end-to-end team's token carries its private key after the dot: only the part before it
  // is ever sent; the key stays in this process.
  const { apiToken, privateKey, pin } = splitToken(token);

  let baseUrl = pickString(options, 'baseUrl', env, rules.ENV_BASE_URL, null);
  if (baseUrl === null) throw new ConfigurationError(notSet(rules.ENV_BASE_URL));
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

  const team = pickString(options, 'team', env, rules.ENV_TEAM, null);
  if (team === null) throw new ConfigurationError(notSet(rules.ENV_TEAM));

  const environment = pickString(
    options,
    'environment',
    env,
    rules.ENV_ENVIRONMENT,
    DEFAULT_ENVIRONMENT,
  );

  const cacheTtl = pickNumber(options, 'cacheTtl', env, rules.ENV_CACHE_TTL, DEFAULT_CACHE_TTL, {
    pattern: WHOLE,
    valid: isCount,
    what: 'a non-negative integer (seconds)',
  });
  const timeout = pickNumber(options, 'timeout', env, rules.ENV_TIMEOUT, DEFAULT_TIMEOUT, {
    pattern: DECIMAL,
    valid: isPositive,
    what: 'a positive number (seconds)',
  });
  const maxRetries = pickNumber(options, 'maxRetries', env, rules.ENV_MAX_RETRIES, DEFAULT_MAX_RETRIES, {
    pattern: WHOLE,
    valid: isCount,
    what: 'a non-negative integer',
  });

  const staleIfError = pickNumber(
    options,
    'staleIfError',
    env,
    rules.ENV_STALE_IF_ERROR,
    DEFAULT_STALE_IF_ERROR,
    { pattern: WHOLE, valid: isCount, what: 'a non-negative integer (seconds)' },
  );
  let onStale = null;
  if (given(options.onStale)) {
    if (typeof options.onStale !== 'function') {
      throw new ConfigurationError('option onStale must be a function');
    }
    onStale = options.onStale;
  }

  let fetchFn = null;
  if (given(options.fetch)) {
    if (typeof options.fetch !== 'function') {
      throw new ConfigurationError('option fetch must be a function like the global fetch');
    }
    fetchFn = options.fetch;
  }

  const live = pickLive(options, env);

  const caFile = pickString(options, 'caFile', env, rules.ENV_CA_FILE, null);
  const caSource = given(options.caFile) ? 'option caFile' : 'CVSM_CA_FILE';
  if (caFile !== null && fetchFn !== null) {
    throw new ConfigurationError(
      `${caSource} cannot be used with option fetch: the given fetch owns its TLS settings`,
    );
  }
  const ca = caFile === null ? null : readCaFile(caFile, caSource);

  // A caller's fetch owns its transport: the proxy variables are its business.
  const proxy = fetchFn === null ? proxyFromEnv(parsed.protocol, env) : null;
  const noProxyVariable = NO_PROXY_VARIABLES.find((v) => given(env[v]));
  const noProxy = noProxyVariable === undefined ? '' : env[noProxyVariable];

  return {
    token: apiToken,
    privateKey,
    pin,
    baseUrl,
    team,
    environment,
    cacheTtl,
    timeout,
    maxRetries,
    staleIfError,
    live,
    caFile,
    ca,
    onStale,
    fetch: fetchFn,
    proxy,
    noProxy,
  };
}

/** A URL's scheme, then its user and password (up to the authority's last `@`). */
const USERINFO = /^([A-Za-z][A-Za-z0-9+.-]*:\/\/)([^/?#]*)@/;

/**
 * Returns `url` as it may be printed: a user and password in it become `***`
 * (`https://user:secret@host/api/v1` shows as `https://***@host/api/v1`, as every SDK prints it).
 * @param {string} url
 * @returns {string}
 */
function displayUrl(url) {
  return url.replace(USERINFO, '$1***@');
}

/**
 * The URL every request goes to: `url` without a user and password. The client authenticates
 * with its Bearer token only, so they are never sent (and fetch refuses a URL that holds them).
 * @param {string} url
 * @returns {string}
 */
function withoutUserinfo(url) {
  return url.replace(USERINFO, '$1');
}

module.exports = {
  resolveConfig,
  displayUrl,
  withoutUserinfo,
  USERINFO,
  DEFAULT_ENVIRONMENT,
  DEFAULT_CACHE_TTL,
  DEFAULT_TIMEOUT,
  DEFAULT_MAX_RETRIES,
  DEFAULT_STALE_IF_ERROR,
};
