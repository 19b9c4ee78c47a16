#!/usr/bin/env node
/**
 * driver: the cvsm conformance driver for the Node client. It reads one JSON request per line
 * on stdin and answers one JSON line per request on stdout, in order, as
 * conformance/PROTOCOL.md describes. Error kinds come from the error classes, never messages.
 */
import { createInterface } from 'node:readline';
import { inspect } from 'node:util';
import rules from '../lib/rules.js';
import {
  Client,
  CvsmError,
  ConfigurationError,
  AuthenticationError,
  PermissionDeniedError,
  SecretNotFoundError,
  RateLimitError,
  ApiError,
  NetworkError,
  DecryptionError,
} from '../lib/index.mjs';

const KINDS = [
  [ConfigurationError, 'configuration'],
  [AuthenticationError, 'authentication'],
  [PermissionDeniedError, 'permission_denied'],
  [SecretNotFoundError, 'not_found'],
  [RateLimitError, 'rate_limited'],
  [ApiError, 'api'],
  [NetworkError, 'network'],
  [DecryptionError, 'decryption'],
];

const OPTION_NAMES = {
  token: 'token',
  base_url: 'baseUrl',
  team: 'team',
  environment: 'environment',
  cache_ttl: 'cacheTtl',
  timeout: 'timeout',
  max_retries: 'maxRetries',
  ca_file: 'caFile',
  stale_if_error: 'staleIfError',
  live: 'live',
};

/** DriverError is an answer with a fixed kind that no SDK error produced. */
class DriverError extends Error {
  constructor(kind, message) {
    super(message);
    this.kind = kind;
  }
}

let client = null;
/** The stale events the current client reported during the op being answered (its onStale hook). */
let staleEvents = [];

function requireClient() {
  if (client === null) throw new DriverError('configuration', 'no client: new_client has not succeeded');
  return client;
}

function configOf(c) {
  return {
    base_url: c.baseUrl,
    team: c.team,
    environment: c.environment,
    cache_ttl: c.cacheTtl,
    timeout: c.timeout,
    max_retries: c.maxRetries,
    stale_if_error: c.staleIfError,
  };
}

const OPS = {
  async new_client({ options = {} }) {
    // The client it replaces ends its change stream (a live client's).
    const previous = client;
    client = null;
    if (previous !== null) await previous.close();
    const opts = {};
    for (const [key, value] of Object.entries(options)) {
      opts[OPTION_NAMES[key] ?? key] = value;
    }
    // The SDK's own stale signal: the hook is called, before the call resolves, each time a
    // kept value answers a failed refresh. Ops are answered one at a time, so the events seen
    // during an op are that op's.
    client = new Client({ ...opts, onStale: (event) => staleEvents.push(event) });
    return { config: configOf(client) };
  },
  async get({ name }) {
    staleEvents = [];
    const value = await requireClient().get(name);
    const stale = staleEvents.some((e) => e.method === 'get' && e.name === name);
    return stale ? { value, stale: true } : { value };
  },
  async refresh({ name, environment }) {
    const options = environment === undefined ? {} : { environment };
    return { value: await requireClient().refresh(name, options) };
  },
  async get_all() {
    staleEvents = [];
    const values = await requireClient().getAll();
    const stale = staleEvents.some((e) => e.method === 'getAll');
    return stale ? { values, stale: true } : { values };
  },
  async inject({ overwrite = false }) {
    return { names: await requireClient().inject({ overwrite }) };
  },
  async clear_cache() {
    requireClient().clearCache();
    return {};
  },
  async describe() {
    return { text: inspect(requireClient()) };
  },
  async set_env({ set = {}, unset = [] }) {
    for (const [name, value] of Object.entries(set)) process.env[name] = String(value);
    for (const name of unset) delete process.env[name];
    return {};
  },
  async capabilities() {
    return { capabilities: [...rules.CAPABILITIES] };
  },
  async get_env({ names = [] }) {
    const values = {};
    for (const name of names) values[name] = process.env[name] ?? null;
    return { values };
  },
  async shutdown() {
    if (client !== null) await client.close();
    return {};
  },
};

function failure(err) {
  const none = { status: null, retry_after: null, request_id: null, suggestion: null };
  if (err instanceof DriverError) {
    return { kind: err.kind, message: err.message, ...none };
  }
  if (err instanceof CvsmError) {
    const found = KINDS.find(([cls]) => err instanceof cls);
    return {
      kind: found ? found[1] : 'internal',
      message: err.message,
      status: err.status ?? null,
      retry_after: err instanceof RateLimitError ? (err.retryAfter ?? null) : null,
      request_id: err.requestId ?? null,
      suggestion: err.suggestion ?? null,
    };
  }
  return {
    kind: 'internal',
    message: `${err && err.name ? err.name : 'Error'}: ${err && err.message ? err.message : String(err)}`,
    ...none,
  };
}

function write(obj) {
  return new Promise((resolve) => process.stdout.write(`${JSON.stringify(obj)}\n`, resolve));
}

async function handle(line) {
  let request;
  try {
    request = JSON.parse(line);
  } catch (err) {
    await write({ id: null, ok: false, error: failure(new DriverError('unsupported', `bad request line: ${err.message}`)) });
    return false;
  }
  const id = request && request.id !== undefined ? request.id : null;
  const op = request && request.op;
  const args = (request && request.args) || {};
  const fn = Object.hasOwn(OPS, op) ? OPS[op] : null;
  if (fn === null) {
    await write({ id, ok: false, error: failure(new DriverError('unsupported', `unknown op ${JSON.stringify(op)}`)) });
    return false;
  }
  try {
    const result = await fn(args);
    await write({ id, ok: true, result });
  } catch (err) {
    await write({ id, ok: false, error: failure(err) });
  }
  return op === 'shutdown';
}

const lines = createInterface({ input: process.stdin, crlfDelay: Infinity });
for await (const line of lines) {
  if (line.trim() === '') continue;
  if (await handle(line)) process.exit(0);
}
process.exit(0);
