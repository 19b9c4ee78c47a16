'use strict';
/**
 * client.test: the Client against the in-process stub API: requests, the team in the path,
 * cache, errors, retries, inject and what a printed client or error may show.
 */

const { test, describe, before, after, beforeEach } = require('node:test');
const assert = require('node:assert/strict');
const util = require('node:util');
const {
  Client,
  CvsmError,
  ConfigurationError,
  AuthenticationError,
  PermissionDeniedError,
  SecretNotFoundError,
  RateLimitError,
  ApiError,
  NetworkError,
} = require('../lib');
const { StubServer, TOKEN, TEAM_ID, TEAM_SLUG, cleanEnv, freePort } = require('./helpers/stub');

cleanEnv();

let stub;

function client(options = {}) {
  return new Client({ token: TOKEN, baseUrl: stub.baseUrl, team: TEAM_SLUG, ...options });
}

before(async () => {
  stub = await new StubServer().start();
});

after(async () => {
  await stub.close();
});

beforeEach(() => {
  stub.requests.length = 0;
  stub.faults.length = 0;
});

describe('requests', () => {
  test('get is one request to the by-name route, the team slug in the path as is', async () => {
    const value = await client().get('DATABASE_URL');
    assert.equal(value, 'postgres://prod-db-value');
    assert.deepEqual(stub.paths, [
      `/api/v1/teams/${TEAM_SLUG}/secrets/by-name/DATABASE_URL?environment=production`,
    ]);
    for (const r of stub.requests) assert.equal(r.method, 'GET');
  });

  test('every request carries the bearer token, Accept and the cvsm-node user agent', async () => {
    await client().get('DATABASE_URL');
    await client().getAll();
    assert.equal(stub.requests.length, 2);
    for (const r of stub.requests) {
      assert.equal(r.headers.authorization, `Bearer ${TOKEN}`);
      assert.equal(r.headers.accept, 'application/json');
      assert.equal(r.headers['user-agent'], 'cvsm-node/0.1.0');
    }
  });

  test('the user agent version is the package version', () => {
    const { VERSION } = require('../lib');
    assert.equal(VERSION, require('../package.json').version);
    assert.equal(VERSION, '0.1.0');
  });

  test('getAll uses the JSON export of the configured environment', async () => {
    const values = await client({ environment: 'staging' }).getAll();
    assert.deepEqual(values, { DATABASE_URL: 'postgres://staging-db-value' });
    assert.deepEqual(stub.paths, [
      `/api/v1/teams/${TEAM_SLUG}/secrets/export?format=json&environment=staging`,
    ]);
  });

  test('a team given as a UUID is used as is', async () => {
    await client({ team: TEAM_ID }).get('API_KEY');
    await client({ team: TEAM_ID }).getAll();
    assert.deepEqual(stub.paths, [
      `/api/v1/teams/${TEAM_ID}/secrets/by-name/API_KEY?environment=production`,
      `/api/v1/teams/${TEAM_ID}/secrets/export?format=json&environment=production`,
    ]);
  });

  test('no call ever asks GET /teams, whether the team is a slug or an id', async () => {
    for (const team of [TEAM_SLUG, TEAM_ID]) {
      const c = client({ team, cacheTtl: 0 });
      await c.get('API_KEY');
      await c.get('DATABASE_URL');
      await c.getAll();
      await assert.rejects(c.get('MISSING'), SecretNotFoundError);
    }
    assert.equal(stub.requests.length, 2 * 5);
    assert.ok(stub.paths.every((p) => !/^\/api\/v1\/teams\/?(\?|$)/.test(p)), stub.paths.join('\n'));
  });

  test('the team and the name are percent-encoded in the path', async () => {
    const c = client({ team: 'a b/c?d' });
    await assert.rejects(c.get('API_KEY'), ConfigurationError);
    assert.equal(stub.paths[0], '/api/v1/teams/a%20b%2Fc%3Fd/secrets/by-name/API_KEY?environment=production');
    assert.equal(stub.paths[1], '/api/v1/teams/a%20b%2Fc%3Fd/secrets?environment=production&search=API_KEY');
  });

  test('a slug that is none of the token\'s teams is a configuration error with status 404', async () => {
    const c = client({ team: 'nobody' });
    await assert.rejects(c.get('API_KEY'), (err) => {
      assert.ok(err instanceof ConfigurationError, String(err));
      assert.equal(err.status, 404);
      assert.equal(err.requestId, 'req-2');
      assert.match(err.message, /CVSM_TEAM/);
      return true;
    });
    // by-name answered 404, the listing 404 too: that decides.
    assert.deepEqual(stub.paths.map((p) => p.replace(/\?.*/, '')), [
      '/api/v1/teams/nobody/secrets/by-name/API_KEY',
      '/api/v1/teams/nobody/secrets',
    ]);
    stub.requests.length = 0;
    await assert.rejects(c.getAll(), (err) => err instanceof ConfigurationError && err.status === 404);
    assert.equal(stub.requests.length, 1);
  });

  test('get reads exactly the name asked for', async () => {
    assert.equal(await client().get('API_KEY'), 'prod-api-key-value');
    assert.equal(await client().get('API_KEY_OLD'), 'prod-old-key-value');
  });
});

describe('cache', () => {
  test('a second get of the same name makes no request', async () => {
    const c = client();
    assert.equal(await c.get('API_KEY'), 'prod-api-key-value');
    const count = stub.requests.length;
    assert.equal(await c.get('API_KEY'), 'prod-api-key-value');
    assert.equal(stub.requests.length, count);
  });

  test('getAll is cached and fills the per-name entries', async () => {
    const c = client();
    const first = await c.getAll();
    const count = stub.requests.length;
    assert.deepEqual(await c.getAll(), first);
    assert.equal(await c.get('DATABASE_URL'), 'postgres://prod-db-value');
    assert.equal(await c.get('API_KEY_OLD'), 'prod-old-key-value');
    assert.equal(stub.requests.length, count);
  });

  test('changing the object getAll returned does not change the cache', async () => {
    const c = client();
    const values = await c.getAll();
    values.API_KEY = 'tampered';
    assert.equal((await c.getAll()).API_KEY, 'prod-api-key-value');
  });

  test('entries expire after cacheTtl seconds', async () => {
    const c = client({ cacheTtl: 1 });
    await c.get('API_KEY');
    await c.getAll();
    const count = stub.requests.length;
    await c.get('API_KEY');
    await c.getAll();
    assert.equal(stub.requests.length, count);
    await new Promise((resolve) => setTimeout(resolve, 1100));
    await c.get('API_KEY');
    await c.getAll();
    assert.equal(stub.requests.length, count + 2);
  });

  test('cacheTtl 0 disables the cache', async () => {
    const c = client({ cacheTtl: 0, team: TEAM_ID });
    await c.get('API_KEY');
    await c.get('API_KEY');
    await c.getAll();
    await c.getAll();
    assert.equal(stub.requests.length, 4);
  });

  test('clearCache forces the next call to ask the server', async () => {
    const c = client({ team: TEAM_ID });
    await c.get('API_KEY');
    await c.getAll();
    c.clearCache();
    await c.get('API_KEY');
    await c.getAll();
    assert.equal(stub.requests.length, 4);
  });

  test('the cache is per client', async () => {
    await client({ team: TEAM_ID }).get('API_KEY');
    await client({ team: TEAM_ID }).get('API_KEY');
    assert.equal(stub.requests.length, 2);
  });

  test('errors are never cached', async () => {
    const c = client({ team: TEAM_ID, maxRetries: 0 });
    stub.fault({ status: 500 });
    await assert.rejects(c.get('API_KEY'), ApiError);
    assert.equal(await c.get('API_KEY'), 'prod-api-key-value');
    await assert.rejects(c.get('NOPE'), SecretNotFoundError);
    await assert.rejects(c.get('NOPE'), SecretNotFoundError);
    // 1 failed get, 1 good one, then by-name and listing for each miss
    assert.equal(stub.requests.length, 6);
  });

  for (const [status, cls] of [
    [401, AuthenticationError],
    [403, PermissionDeniedError],
  ]) {
    test(`a ${status} (${cls.name}) empties the whole cache`, async () => {
      const c = client({ team: TEAM_ID });
      await c.get('API_KEY');
      await c.getAll();
      stub.requests.length = 0;
      stub.fault({ status, body: { error: 'ditolak' } });
      await assert.rejects(c.get('NOT_CACHED'), cls);
      await c.get('API_KEY');
      await c.getAll();
      assert.equal(stub.requests.length, 3);
    });
  }

  test('a 404 or a 500 leaves the cache as it is', async () => {
    const c = client({ team: TEAM_ID, maxRetries: 0 });
    await c.get('API_KEY');
    stub.fault({ status: 500 });
    await assert.rejects(c.getAll(), ApiError);
    await assert.rejects(c.get('MISSING'), SecretNotFoundError);
    stub.requests.length = 0;
    assert.equal(await c.get('API_KEY'), 'prod-api-key-value');
    assert.equal(stub.requests.length, 0);
  });
});

describe('errors', () => {
  const cases = [
    [401, AuthenticationError],
    [403, PermissionDeniedError],
    [409, ApiError],
    [422, ApiError],
    [500, ApiError],
  ];
  for (const [status, cls] of cases) {
    test(`HTTP ${status} raises ${cls.name} with the status and the server message, without retry`, async () => {
      stub.fault({ status, body: { error: 'pesan dari server' } });
      const c = client({ team: TEAM_ID });
      await assert.rejects(c.get('API_KEY'), (err) => {
        assert.ok(err instanceof cls, `${err.name} is not ${cls.name}`);
        assert.ok(err instanceof CvsmError);
        assert.equal(err.name, cls.name);
        assert.equal(err.status, status);
        assert.equal(err.message, `${status}: pesan dari server`);
        assert.equal(err.requestId, 'req-1');
        assert.equal(err.suggestion, null);
        return true;
      });
      assert.equal(stub.requests.length, 1);
    });
  }

  test('a non-JSON error body still gives the status in the message', async () => {
    stub.fault({ status: 418, body: '<html>teapot</html>' });
    await assert.rejects(client({ team: TEAM_ID }).get('API_KEY'), (err) => {
      assert.ok(err instanceof ApiError);
      assert.equal(err.status, 418);
      assert.match(err.message, /^418: /);
      return true;
    });
  });

  test('HTTP 429 raises RateLimitError at once with retryAfter from Retry-After', async () => {
    stub.fault({ status: 429, body: { error: 'terlalu banyak' }, headers: { 'Retry-After': '7' } });
    await assert.rejects(client({ team: TEAM_ID }).get('API_KEY'), (err) => {
      assert.ok(err instanceof RateLimitError);
      assert.equal(err.status, 429);
      assert.equal(err.retryAfter, 7);
      return true;
    });
    assert.equal(stub.requests.length, 1);
  });

  test('HTTP 429 without Retry-After gives retryAfter null', async () => {
    stub.fault({ status: 429 });
    await assert.rejects(client({ team: TEAM_ID }).getAll(), (err) => {
      assert.ok(err instanceof RateLimitError);
      assert.equal(err.retryAfter, null);
      return true;
    });
  });

  test('Retry-After as an HTTP date becomes whole seconds from now', () => {
    const { parseRetryAfter } = require('../lib/transport');
    const inTwoMinutes = new Date(Date.now() + 120_000).toUTCString();
    const seconds = parseRetryAfter(inTwoMinutes);
    assert.ok(seconds >= 118 && seconds <= 120, String(seconds));
    assert.equal(parseRetryAfter('3'), 3);
    assert.equal(parseRetryAfter(null), null);
    assert.equal(parseRetryAfter('soon'), null);
  });

  test('an absent name is SecretNotFoundError with status 404, after by-name and the listing', async () => {
    await assert.rejects(client().get('MISSING'), (err) => {
      assert.ok(err instanceof SecretNotFoundError);
      assert.equal(err.status, 404);
      assert.equal(err.message, 'secret "MISSING" not found in production');
      return true;
    });
    assert.deepEqual(stub.paths, [
      `/api/v1/teams/${TEAM_SLUG}/secrets/by-name/MISSING?environment=production`,
      `/api/v1/teams/${TEAM_SLUG}/secrets?environment=production&search=MISSING`,
    ]);
  });

  test('a name that differs only in case suggests the existing name', async () => {
    await assert.rejects(client().get('database_url'), (err) => {
      assert.ok(err instanceof SecretNotFoundError);
      assert.equal(
        err.message,
        'secret "database_url" not found in production; did you mean "DATABASE_URL"?',
      );
      return true;
    });
  });

  test('a name present only in another environment is not found', async () => {
    await assert.rejects(client({ environment: 'staging' }).get('API_KEY'), SecretNotFoundError);
  });

  test('get rejects a name that is not a string with a TypeError, without a request', async () => {
    await assert.rejects(client().get(42), TypeError);
    await assert.rejects(client().get(undefined), TypeError);
    assert.equal(stub.requests.length, 0);
  });
});

describe('retries', () => {
  for (const status of [502, 503, 504]) {
    test(`HTTP ${status} is retried and the retry can succeed`, async () => {
      stub.fault({ status }, { status });
      assert.equal(await client({ team: TEAM_ID }).getAll().then((v) => v.API_KEY), 'prod-api-key-value');
      assert.equal(stub.requests.length, 3);
    });
  }

  test('after maxRetries more attempts a 503 raises ApiError with status 503', async () => {
    stub.fault({ status: 503 }, { status: 503 }, { status: 503 }, { status: 503 });
    await assert.rejects(client({ team: TEAM_ID }).getAll(), (err) => {
      assert.ok(err instanceof ApiError);
      assert.equal(err.status, 503);
      return true;
    });
    assert.equal(stub.requests.length, 3);
  });

  test('maxRetries bounds the attempts', async () => {
    stub.fault({ status: 503 }, { status: 503 }, { status: 503 }, { status: 503 }, { status: 503 });
    await assert.rejects(client({ team: TEAM_ID, maxRetries: 0 }).getAll(), ApiError);
    assert.equal(stub.requests.length, 1);
    stub.requests.length = 0;
    stub.faults.length = 0;
    stub.fault({ status: 503 }, { status: 503 }, { status: 503 }, { status: 503 }, { status: 503 });
    await assert.rejects(client({ team: TEAM_ID, maxRetries: 3 }).getAll(), ApiError);
    assert.equal(stub.requests.length, 4);
  });

  for (const status of [400, 401, 403, 404, 409, 422, 429]) {
    test(`HTTP ${status} is never retried`, async () => {
      stub.fault({ status }, { status });
      await assert.rejects(client({ team: TEAM_ID }).getAll(), CvsmError);
      assert.equal(stub.requests.length, 1);
    });
  }

  test('a dropped connection is retried', async () => {
    stub.fault({ destroy: true }, { destroy: true });
    assert.equal(await client({ team: TEAM_ID }).get('API_KEY'), 'prod-api-key-value');
    assert.equal(stub.requests.length, 3);
  });

  test('dropped connections raise NetworkError after the retries', async () => {
    stub.fault({ destroy: true }, { destroy: true }, { destroy: true });
    await assert.rejects(client({ team: TEAM_ID }).getAll(), (err) => {
      assert.ok(err instanceof NetworkError);
      assert.equal(err.status, null);
      return true;
    });
    assert.equal(stub.requests.length, 3);
  });

  test('a refused connection raises NetworkError', async () => {
    const port = await freePort();
    const c = new Client({ token: TOKEN, baseUrl: `http://127.0.0.1:${port}/api/v1`, team: TEAM_ID });
    await assert.rejects(c.get('API_KEY'), (err) => {
      assert.ok(err instanceof NetworkError);
      assert.match(err.message, /ECONNREFUSED/);
      return true;
    });
  });

  test('an attempt slower than timeout is a NetworkError, and is retried', async () => {
    stub.fault({ delayMs: 1000 });
    await assert.rejects(client({ team: TEAM_ID, timeout: 0.2, maxRetries: 0 }).getAll(), (err) => {
      assert.ok(err instanceof NetworkError);
      assert.match(err.message, /timed out after 0.2s/);
      return true;
    });
    stub.requests.length = 0;
    stub.fault({ delayMs: 1000 });
    const values = await client({ team: TEAM_ID, timeout: 0.2 }).getAll();
    assert.equal(values.API_KEY, 'prod-api-key-value');
    assert.equal(stub.requests.length, 2);
  });

  test('an unreadable success body is a NetworkError, and is retried', async () => {
    stub.fault({ status: 200, body: 'not json' });
    assert.equal((await client({ team: TEAM_ID }).getAll()).API_KEY, 'prod-api-key-value');
    assert.equal(stub.requests.length, 2);
    stub.requests.length = 0;
    stub.fault({ status: 200, body: '{' }, { status: 200, body: '{' }, { status: 200, body: '{' });
    await assert.rejects(client({ team: TEAM_ID }).getAll(), NetworkError);
    assert.equal(stub.requests.length, 3);
  });

  test('the backoff before retry n is a random time below 0.1 * 2**n seconds', () => {
    const { backoffMs } = require('../lib/transport');
    const random = Math.random;
    try {
      Math.random = () => 0.999999;
      assert.ok(backoffMs(0) < 100 && backoffMs(0) > 99);
      assert.ok(backoffMs(1) < 200 && backoffMs(1) > 199);
      Math.random = () => 0;
      assert.equal(backoffMs(3), 0);
    } finally {
      Math.random = random;
    }
  });
});

describe('configuration', () => {
  const saved = {};
  const VARS = ['CVSM_TOKEN', 'CVSM_BASE_URL', 'CVSM_TEAM', 'CVSM_ENVIRONMENT', 'CVSM_CACHE_TTL'];
  beforeEach(() => {
    for (const v of VARS) delete process.env[v];
  });
  before(() => {
    for (const v of VARS) saved[v] = process.env[v];
  });
  after(() => {
    for (const v of VARS) {
      if (saved[v] === undefined) delete process.env[v];
      else process.env[v] = saved[v];
    }
  });

  function setEnv() {
    process.env.CVSM_TOKEN = TOKEN;
    process.env.CVSM_BASE_URL = `${stub.baseUrl}/`;
    process.env.CVSM_TEAM = TEAM_SLUG;
  }

  test('everything can come from CVSM_* variables, with the documented defaults', async () => {
    setEnv();
    const c = new Client();
    assert.equal(c.baseUrl, stub.baseUrl);
    assert.equal(c.team, TEAM_SLUG);
    assert.equal(c.environment, 'production');
    assert.equal(c.cacheTtl, 30);
    assert.equal(c.timeout, 10);
    assert.equal(c.maxRetries, 2);
    assert.equal(await c.get('API_KEY'), 'prod-api-key-value');
  });

  test('CVSM_ENVIRONMENT and CVSM_CACHE_TTL are read', async () => {
    setEnv();
    process.env.CVSM_ENVIRONMENT = 'staging';
    process.env.CVSM_CACHE_TTL = '0';
    const c = new Client();
    assert.equal(c.environment, 'staging');
    assert.equal(c.cacheTtl, 0);
    assert.equal(await c.get('DATABASE_URL'), 'postgres://staging-db-value');
  });

  test('explicit options win over the variables', () => {
    setEnv();
    process.env.CVSM_ENVIRONMENT = 'staging';
    process.env.CVSM_CACHE_TTL = '5';
    const c = new Client({
      baseUrl: 'http://example.test/api/v1///',
      team: 'other',
      environment: 'development',
      cacheTtl: 7,
      timeout: 2.5,
      maxRetries: 0,
    });
    assert.deepEqual(c.toJSON(), {
      baseUrl: 'http://example.test/api/v1',
      team: 'other',
      environment: 'development',
      cacheTtl: 7,
      timeout: 2.5,
      maxRetries: 0,
      staleIfError: 0,
      live: false,
      caFile: null,
    });
  });

  test('the configuration getters are read-only', () => {
    const c = client();
    assert.throws(() => {
      c.cacheTtl = 99;
    }, TypeError);
    assert.equal(c.cacheTtl, 30);
  });

  for (const [variable, missing] of [
    ['CVSM_TOKEN', 'token'],
    ['CVSM_BASE_URL', 'baseUrl'],
    ['CVSM_TEAM', 'team'],
  ]) {
    test(`a missing ${missing} is a ConfigurationError naming ${variable}`, () => {
      setEnv();
      delete process.env[variable];
      assert.throws(() => new Client(), (err) => {
        assert.ok(err instanceof ConfigurationError);
        assert.ok(err instanceof CvsmError);
        assert.equal(err.message, `${variable} is not set`);
        assert.equal(err.status, null);
        return true;
      });
    });
  }

  for (const bad of ['-1', 'abc', '1.5', '30s']) {
    test(`CVSM_CACHE_TTL=${bad} is a ConfigurationError`, () => {
      setEnv();
      process.env.CVSM_CACHE_TTL = bad;
      assert.throws(() => new Client(), (err) => {
        assert.ok(err instanceof ConfigurationError);
        assert.match(err.message, /CVSM_CACHE_TTL/);
        return true;
      });
    });
  }

  test('invalid options are ConfigurationErrors', () => {
    setEnv();
    for (const options of [
      { cacheTtl: -1 },
      { cacheTtl: 1.5 },
      { timeout: 0 },
      { timeout: 'ten' },
      { maxRetries: -1 },
      { baseURL: 'http://x' },
      { baseUrl: 'not a url' },
      { baseUrl: 'ftp://example.test' },
    ]) {
      assert.throws(() => new Client(options), ConfigurationError, JSON.stringify(options));
    }
  });
});

describe('inject', () => {
  const NAMES = ['API_KEY', 'API_KEY_OLD', 'DATABASE_URL'];
  beforeEach(() => {
    for (const n of NAMES) delete process.env[n];
  });
  after(() => {
    for (const n of NAMES) delete process.env[n];
  });

  test('inject sets every name and returns them sorted', async () => {
    const names = await client().inject();
    assert.deepEqual(names, ['API_KEY', 'API_KEY_OLD', 'DATABASE_URL']);
    assert.equal(process.env.DATABASE_URL, 'postgres://prod-db-value');
    assert.equal(process.env.API_KEY, 'prod-api-key-value');
  });

  test('inject keeps a variable that is already set', async () => {
    process.env.API_KEY = 'local';
    process.env.DATABASE_URL = '';
    const names = await client().inject();
    assert.deepEqual(names, ['API_KEY_OLD']);
    assert.equal(process.env.API_KEY, 'local');
    assert.equal(process.env.DATABASE_URL, '');
  });

  test('inject({overwrite: true}) replaces variables that are set', async () => {
    process.env.API_KEY = 'local';
    const names = await client().inject({ overwrite: true });
    assert.deepEqual(names, NAMES);
    assert.equal(process.env.API_KEY, 'prod-api-key-value');
  });
});

describe('secrecy', () => {
  test('the printed and serialised client hold no token and no value', async () => {
    const c = client();
    await c.getAll();
    await c.get('API_KEY');
    const printed = [
      util.inspect(c),
      util.inspect(c, { showHidden: true, depth: Infinity }),
      util.inspect({ nested: [c] }, { depth: Infinity }),
      util.format('%o %O %s %j', c, c, c, c),
      JSON.stringify(c),
      JSON.stringify({ c }),
      String(c),
    ];
    for (const text of printed) {
      assert.ok(!text.includes(TOKEN), text);
      assert.ok(!text.includes('a1b2c3d4'), text);
      for (const value of ['prod-api-key-value', 'postgres://prod-db-value', 'prod-old-key-value']) {
        assert.ok(!text.includes(value), text);
      }
    }
    assert.match(util.inspect(c), /^Client \{/);
    assert.match(util.inspect(c), /baseUrl: 'http:\/\/127\.0\.0\.1:\d+\/api\/v1'/);
    assert.match(util.inspect(c), /cacheTtl: 30/);
  });

  test('a token echoed by the server never reaches an error message', async () => {
    stub.fault({ status: 500, body: { error: `bad token ${TOKEN}` } });
    await assert.rejects(client({ team: TEAM_ID, maxRetries: 0 }).get('API_KEY'), (err) => {
      assert.ok(err instanceof ApiError);
      assert.ok(!err.message.includes(TOKEN), err.message);
      assert.ok(!util.inspect(err).includes(TOKEN));
      assert.match(err.message, /\[redacted\]/);
      return true;
    });
  });

  test('error messages of every kind hold no token and no value', async () => {
    const c = client({ team: TEAM_ID, maxRetries: 0, timeout: 0.2 });
    await c.getAll();
    c.clearCache();
    const faults = [
      { status: 401 },
      { status: 403 },
      { status: 404 },
      { status: 429, headers: { 'Retry-After': '1' } },
      { status: 503 },
      { destroy: true },
      { delayMs: 1000 },
      { status: 200, body: 'garbage' },
    ];
    const messages = [];
    for (const fault of faults) {
      stub.fault(fault);
      await assert.rejects(c.get('API_KEY'), (err) => {
        assert.ok(err instanceof CvsmError, String(err));
        messages.push(err.message, util.inspect(err));
        return true;
      });
    }
    await assert.rejects(c.get('api_key'), (err) => {
      messages.push(err.message);
      return true;
    });
    assert.equal(messages.length, 17);
    for (const text of messages) {
      assert.ok(!text.includes(TOKEN), text);
      assert.ok(!text.includes('prod-api-key-value'), text);
    }
  });
});
