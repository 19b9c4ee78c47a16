'use strict';
/**
 * stale.test: rule R14, stale if error, against the in-process stub API: which failures a kept
 * value answers, its bound, the onStale hook, the warning once per name, clearCache and the
 * refusals (401, 403) that empty the cache, and the configuration.
 */

const { test, describe, before, after, beforeEach, afterEach } = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
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
const { StubServer, TOKEN, TEAM_ID, cleanEnv } = require('./helpers/stub');

cleanEnv();

// Node prints every process warning on stderr through its own listener; the tests read the
// warnings themselves, so that listener is set aside while this file runs.
const printers = process.listeners('warning');
process.removeAllListeners('warning');
let warnings = [];
const recordWarning = (w) => warnings.push(w);
process.on('warning', recordWarning);

let stub;
let events;

/** client makes a client whose onStale hook records into `events`; cacheTtl 0 unless given. */
function client(options = {}) {
  return new Client({
    token: TOKEN,
    baseUrl: stub.baseUrl,
    team: TEAM_ID,
    cacheTtl: 0,
    staleIfError: 30,
    timeout: 0.3,
    onStale: (event) => events.push(event),
    ...options,
  });
}

/** settle lets the warnings emitted so far (on the next tick) arrive. */
const settle = () => new Promise((resolve) => setImmediate(resolve));
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

before(async () => {
  stub = await new StubServer().start();
});

after(async () => {
  await stub.close();
  process.off('warning', recordWarning);
  for (const listener of printers) process.on('warning', listener);
});

beforeEach(async () => {
  await settle();
  stub.requests.length = 0;
  stub.faults.length = 0;
  events = [];
  warnings = [];
});

afterEach(() => {
  stub.faults.length = 0;
});

/** Each failure that a kept value answers, as stub faults, with the error it would be. */
const SERVED = [
  ['a 503 after the retries', [{ status: 503 }, { status: 503 }, { status: 503 }], ApiError, 3],
  ['a 502 after the retries', [{ status: 502 }, { status: 502 }, { status: 502 }], ApiError, 3],
  ['a 504 after the retries', [{ status: 504 }, { status: 504 }, { status: 504 }], ApiError, 3],
  ['a 500 (not retried)', [{ status: 500 }], ApiError, 1],
  ['a 429', [{ status: 429, headers: { 'Retry-After': '5' } }], RateLimitError, 1],
  ['dropped connections after the retries', [{ destroy: true }, { destroy: true }, { destroy: true }], NetworkError, 3],
  ['unreadable answers after the retries', [{ status: 200, body: '<html>' }, { status: 200, body: '<html>' }, { status: 200, body: '<html>' }], NetworkError, 3],
  ['timeouts after the retries', [{ delayMs: 1000 }, { delayMs: 1000 }, { delayMs: 1000 }], NetworkError, 3],
];

describe('R14: a failed refresh returns the kept value', () => {
  for (const [what, faults, cls, attempts] of SERVED) {
    test(`get: ${what} returns the kept value, reported once through onStale`, async () => {
      const c = client();
      assert.equal(await c.get('API_KEY'), 'prod-api-key-value');
      assert.deepEqual(events, []);
      stub.requests.length = 0;
      stub.fault(...faults);
      assert.equal(await c.get('API_KEY'), 'prod-api-key-value');
      assert.equal(stub.requests.length, attempts, 'the retries happen first');
      assert.equal(events.length, 1);
      const [event] = events;
      assert.equal(event.method, 'get');
      assert.equal(event.name, 'API_KEY');
      assert.equal(event.environment, 'production');
      assert.ok(event.error instanceof cls, String(event.error));
      assert.equal(typeof event.age, 'number');
      assert.ok(event.age >= 0 && event.age < 5, String(event.age));
      assert.ok(Object.isFrozen(event));
    });

    test(`getAll: ${what} returns a copy of the kept export`, async () => {
      const c = client();
      const first = await c.getAll();
      stub.fault(...faults);
      const stale = await c.getAll();
      assert.deepEqual(stale, first);
      stale.API_KEY = 'changed';
      assert.equal(events.length, 1);
      assert.equal(events[0].method, 'getAll');
      assert.equal(events[0].name, null);
      assert.ok(events[0].error instanceof cls);
      stub.fault(...faults);
      assert.equal((await c.getAll()).API_KEY, 'prod-api-key-value', 'the kept export is not changed');
    });
  }

  test('a fresh answer is not reported as stale', async () => {
    const c = client();
    await c.get('API_KEY');
    await c.getAll();
    stub.fault({ status: 503 }, { status: 503 }, { status: 503 });
    await c.get('API_KEY');
    assert.equal(events.length, 1);
    assert.equal(await c.get('API_KEY'), 'prod-api-key-value');
    await c.getAll();
    assert.equal(events.length, 1);
  });

  test('a value getAll fetched is kept for get too', async () => {
    const c = client({ maxRetries: 0 });
    await c.getAll();
    stub.requests.length = 0;
    stub.fault({ status: 503 });
    assert.equal(await c.get('API_KEY_OLD'), 'prod-old-key-value');
    assert.equal(stub.requests.length, 1, 'with cacheTtl 0, get still asked the server');
    assert.equal(events[0].name, 'API_KEY_OLD');
  });

  test('with cacheTtl 0 every call asks the server; only a failed one is answered from what is kept', async () => {
    const c = client({ maxRetries: 0 });
    await c.get('API_KEY');
    await c.get('API_KEY');
    await c.getAll();
    await c.getAll();
    assert.equal(stub.requests.length, 4);
    assert.deepEqual(events, []);
  });

  test('a name never fetched has nothing kept: the error is thrown', async () => {
    const c = client({ maxRetries: 0 });
    await c.get('API_KEY');
    stub.fault({ status: 503 }, { status: 503 });
    await assert.rejects(c.get('DATABASE_URL'), (err) => err instanceof ApiError && err.status === 503);
    await assert.rejects(c.getAll(), (err) => err instanceof ApiError && err.status === 503);
    assert.deepEqual(events, []);
  });

  test('values of another environment are not kept for this one', async () => {
    await client({ environment: 'staging' }).get('DATABASE_URL');
    stub.fault({ status: 503 });
    await assert.rejects(client({ maxRetries: 0 }).get('DATABASE_URL'), ApiError);
  });
});

describe('R14: other errors never serve a kept value', () => {
  const NOT_SERVED = [
    ['a 404 (then the listing decides)', { status: 404 }, SecretNotFoundError],
    ['a 400 (a rejected environment)', { status: 400 }, ConfigurationError],
    ['a 409', { status: 409 }, ApiError],
    ['a 422', { status: 422 }, ApiError],
    ['a 418', { status: 418 }, ApiError],
    ['a 302 (never followed)', { status: 302, headers: { Location: '/elsewhere' } }, ApiError],
  ];
  for (const [what, fault, cls] of NOT_SERVED) {
    test(`${what} is thrown, and the value stays kept`, async () => {
      const c = client({ maxRetries: 0 });
      await c.get('API_KEY');
      stub.fault(fault);
      await assert.rejects(c.get('API_KEY'), (err) => {
        assert.ok(err instanceof cls, String(err));
        return true;
      });
      assert.deepEqual(events, []);
      // Still kept: an outage right after is answered with it.
      stub.fault({ status: 503 });
      assert.equal(await c.get('API_KEY'), 'prod-api-key-value');
      assert.equal(events.length, 1);
    });
  }

  test('after a 404 to by-name, a failing listing is thrown, never answered with a kept value', async () => {
    const c = client({ maxRetries: 0 });
    await c.get('API_KEY');
    stub.fault({ status: 404 }, { status: 503 });
    await assert.rejects(c.get('API_KEY'), (err) => err instanceof ApiError && err.status === 503);
    stub.fault({ status: 404 }, { destroy: true });
    await assert.rejects(c.get('API_KEY'), NetworkError);
    assert.deepEqual(events, []);
  });

  test('a 400 or 404 to the export is thrown', async () => {
    const c = client({ maxRetries: 0 });
    await c.getAll();
    for (const status of [400, 404]) {
      stub.fault({ status });
      await assert.rejects(c.getAll(), (err) => err instanceof ConfigurationError && err.status === status);
    }
    assert.deepEqual(events, []);
  });

  for (const [status, cls] of [
    [401, AuthenticationError],
    [403, PermissionDeniedError],
  ]) {
    test(`a ${status} is thrown and empties the whole cache, kept values included`, async () => {
      const c = client({ cacheTtl: 30, maxRetries: 0 });
      await c.get('API_KEY');
      await c.getAll();
      stub.fault({ status });
      await assert.rejects(c.get('NOT_CACHED'), cls);
      stub.fault({ status: 503 }, { status: 503 });
      await assert.rejects(c.get('API_KEY'), (err) => err instanceof ApiError && err.status === 503);
      await assert.rejects(c.getAll(), (err) => err instanceof ApiError && err.status === 503);
      assert.deepEqual(events, []);
    });
  }

  test('a 401 on a refresh of the very name is thrown, not answered', async () => {
    const c = client({ maxRetries: 0 });
    await c.get('API_KEY');
    stub.fault({ status: 401 });
    await assert.rejects(c.get('API_KEY'), AuthenticationError);
    assert.deepEqual(events, []);
  });

  test('without staleIfError (the default) a failed refresh is the error', async () => {
    const c = client({ staleIfError: undefined, cacheTtl: 1, maxRetries: 0 });
    assert.equal(c.staleIfError, 0);
    await c.get('API_KEY');
    await c.getAll();
    await sleep(1100);
    stub.fault({ status: 503 }, { status: 503 });
    await assert.rejects(c.get('API_KEY'), ApiError);
    await assert.rejects(c.getAll(), ApiError);
    assert.deepEqual(events, []);
  });

  test('without staleIfError a value a concurrent call just stored does not answer a failure', async () => {
    // Call 1 waits for its answer while call 2 reads and caches the value; then call 1 fails.
    let releaseFirst;
    const answers = [
      new Promise((resolve) => {
        releaseFirst = () => resolve(new Response('{"error": "x"}', { status: 503 }));
      }),
      Promise.resolve(new Response(JSON.stringify({ secret: {}, value: 'v' }), { status: 200 })),
    ];
    const c = client({ staleIfError: 0, cacheTtl: 30, maxRetries: 0, fetch: () => answers.shift() });
    const first = c.get('API_KEY');
    assert.equal(await c.get('API_KEY'), 'v');
    releaseFirst();
    await assert.rejects(first, (err) => err instanceof ApiError && err.status === 503);
    assert.deepEqual(events, []);
  });
});

describe('R14: the bound is cacheTtl + staleIfError since the value was fetched', () => {
  test('fresh for cacheTtl, then answered stale until the bound, then the error', async () => {
    const c = client({ cacheTtl: 1, staleIfError: 1, maxRetries: 0 });
    await c.get('API_KEY');
    await c.getAll();
    stub.requests.length = 0;
    await c.get('API_KEY');
    assert.equal(stub.requests.length, 0, 'fresh: from the cache');

    await sleep(1300);
    stub.fault({ status: 503 }, { status: 503 });
    assert.equal(await c.get('API_KEY'), 'prod-api-key-value');
    assert.equal((await c.getAll()).API_KEY, 'prod-api-key-value');
    assert.equal(events.length, 2);
    assert.ok(events[0].age >= 1.3 && events[0].age < 2, String(events[0].age));

    await sleep(800);
    stub.fault({ status: 503 }, { status: 503 });
    await assert.rejects(c.get('API_KEY'), (err) => err instanceof ApiError && err.status === 503);
    await assert.rejects(c.getAll(), (err) => err instanceof ApiError && err.status === 503);
    assert.equal(events.length, 2);
  });

  test('a stale answer does not renew the value: the bound still runs from the fetch', async () => {
    const c = client({ cacheTtl: 0, staleIfError: 1, maxRetries: 0 });
    await c.get('API_KEY');
    await sleep(600);
    stub.fault({ status: 503 });
    assert.equal(await c.get('API_KEY'), 'prod-api-key-value');
    await sleep(600);
    stub.fault({ status: 503 });
    await assert.rejects(c.get('API_KEY'), ApiError);
  });

  test('a successful refresh starts the bound again', async () => {
    const c = client({ cacheTtl: 0, staleIfError: 1, maxRetries: 0 });
    await c.get('API_KEY');
    await sleep(600);
    await c.get('API_KEY');
    await sleep(600);
    stub.fault({ status: 503 });
    assert.equal(await c.get('API_KEY'), 'prod-api-key-value');
  });
});

describe('R14: clearCache forgets kept values', () => {
  test('after clearCache a failed refresh is the error', async () => {
    const c = client({ maxRetries: 0 });
    await c.get('API_KEY');
    await c.getAll();
    c.clearCache();
    stub.fault({ status: 503 }, { status: 503 });
    await assert.rejects(c.get('API_KEY'), ApiError);
    await assert.rejects(c.getAll(), ApiError);
    assert.deepEqual(events, []);
  });
});

describe('R14: the warning, once per name', () => {
  test('the first stale answer of a name is a CvsmStaleWarning naming the secret and the error, never the value', async () => {
    const c = client({ maxRetries: 0 });
    await c.get('API_KEY');
    stub.fault({ status: 503, body: { error: 'sedang perawatan' } });
    await c.get('API_KEY');
    await settle();
    assert.equal(warnings.length, 1);
    const [w] = warnings;
    assert.equal(w.name, 'CvsmStaleWarning');
    assert.equal(w.code, 'CVSM_STALE_VALUE');
    assert.match(w.message, /"API_KEY"/);
    assert.match(w.message, /production/);
    assert.match(w.message, /ApiError/);
    assert.match(w.message, /503/);
    for (const text of [w.message, util.inspect(w), String(w.stack)]) {
      assert.ok(!text.includes('prod-api-key-value'), text);
      assert.ok(!text.includes(TOKEN), text);
    }
  });

  test('later stale answers of the same name are not warned again; another name is', async () => {
    const c = client({ maxRetries: 0 });
    await c.get('API_KEY');
    await c.get('DATABASE_URL');
    stub.fault({ status: 503 }, { destroy: true }, { status: 429 });
    await c.get('API_KEY');
    await c.get('API_KEY');
    await c.get('DATABASE_URL');
    await settle();
    assert.equal(events.length, 3, 'onStale is called every time');
    assert.equal(warnings.length, 2);
    assert.match(warnings[0].message, /"API_KEY"/);
    assert.match(warnings[1].message, /"DATABASE_URL"/);
    assert.match(warnings[1].message, /RateLimitError/);
  });

  test('a name read fresh again is warned again at its next stale answer', async () => {
    const c = client({ maxRetries: 0 });
    await c.get('API_KEY');
    stub.fault({ status: 503 });
    await c.get('API_KEY');
    await c.get('API_KEY');
    stub.fault({ status: 503 });
    await c.get('API_KEY');
    await settle();
    assert.equal(warnings.length, 2);
  });

  test('a stale getAll is warned once, as the secrets of the environment', async () => {
    const c = client({ maxRetries: 0 });
    await c.getAll();
    stub.fault({ status: 503 }, { status: 503 });
    await c.getAll();
    await c.getAll();
    await settle();
    assert.equal(warnings.length, 1);
    assert.match(warnings[0].message, /the secrets of production \(getAll\)/);
    for (const value of ['prod-api-key-value', 'postgres://prod-db-value', 'prod-old-key-value']) {
      assert.ok(!warnings[0].message.includes(value));
    }
  });

  test('no warning without a stale answer', async () => {
    const c = client({ maxRetries: 0 });
    await c.get('API_KEY');
    stub.fault({ status: 404 });
    await assert.rejects(c.get('API_KEY'), SecretNotFoundError);
    await settle();
    assert.deepEqual(warnings, []);
  });
});

describe('R14: the onStale hook', () => {
  test('is optional: without it the kept value is still returned', async () => {
    const c = client({ onStale: undefined, maxRetries: 0 });
    await c.get('API_KEY');
    stub.fault({ status: 503 });
    assert.equal(await c.get('API_KEY'), 'prod-api-key-value');
  });

  test('is called before the call resolves', async () => {
    let seen = null;
    const c = client({ maxRetries: 0, onStale: (event) => (seen = event.name) });
    await c.get('API_KEY');
    stub.fault({ status: 503 });
    const pending = c.get('API_KEY');
    await pending;
    assert.equal(seen, 'API_KEY');
  });

  test('an exception it throws rejects the call', async () => {
    const refusal = new Error('no stale values here');
    const c = client({ maxRetries: 0, onStale: () => { throw refusal; } });
    await c.get('API_KEY');
    stub.fault({ status: 503 });
    await assert.rejects(c.get('API_KEY'), (err) => err === refusal);
  });

  test('must be a function', () => {
    for (const onStale of ['log', 1, {}]) {
      assert.throws(() => client({ onStale }), (err) => {
        assert.ok(err instanceof ConfigurationError);
        assert.match(err.message, /onStale/);
        return true;
      });
    }
  });
});

describe('R14: configuration', () => {
  afterEach(() => {
    delete process.env.CVSM_STALE_IF_ERROR;
  });

  test('staleIfError defaults to 0 and is shown in toJSON and inspect', () => {
    const c = new Client({ token: TOKEN, baseUrl: stub.baseUrl, team: TEAM_ID });
    assert.equal(c.staleIfError, 0);
    assert.equal(c.toJSON().staleIfError, 0);
    assert.match(util.inspect(c), /staleIfError: 0/);
  });

  test('CVSM_STALE_IF_ERROR is read, and the option wins over it', () => {
    process.env.CVSM_STALE_IF_ERROR = '300';
    assert.equal(new Client({ token: TOKEN, baseUrl: stub.baseUrl, team: TEAM_ID }).staleIfError, 300);
    assert.equal(client({ staleIfError: 5 }).staleIfError, 5);
    assert.equal(client({ staleIfError: 0 }).staleIfError, 0);
    process.env.CVSM_STALE_IF_ERROR = '';
    assert.equal(new Client({ token: TOKEN, baseUrl: stub.baseUrl, team: TEAM_ID }).staleIfError, 0);
  });

  for (const bad of ['-1', 'soon', '1.5', '30s', '1e3']) {
    test(`CVSM_STALE_IF_ERROR=${bad} is a ConfigurationError naming it`, () => {
      process.env.CVSM_STALE_IF_ERROR = bad;
      assert.throws(() => new Client({ token: TOKEN, baseUrl: stub.baseUrl, team: TEAM_ID }), (err) => {
        assert.ok(err instanceof ConfigurationError);
        assert.match(err.message, /^CVSM_STALE_IF_ERROR must be a non-negative integer/);
        return true;
      });
    });
  }

  for (const bad of [-1, 1.5, '30', NaN, Infinity]) {
    test(`option staleIfError ${String(bad)} is a ConfigurationError`, () => {
      assert.throws(() => client({ staleIfError: bad }), (err) => {
        assert.ok(err instanceof ConfigurationError);
        assert.match(err.message, /staleIfError/);
        return true;
      });
    });
  }

  test('the configuration getter is read-only', () => {
    const c = client();
    assert.throws(() => {
      c.staleIfError = 99;
    }, TypeError);
  });
});

describe('R14 and R12: nothing of it at rest or in print', () => {
  test('serving stale values writes nothing to disk', async (t) => {
    const names = ['writeFile', 'writeFileSync', 'appendFile', 'appendFileSync', 'createWriteStream', 'open', 'openSync', 'mkdtemp', 'mkdtempSync'];
    const spies = names.map((name) => [name, t.mock.method(fs, name)]);
    spies.push(['promises.writeFile', t.mock.method(fs.promises, 'writeFile')]);
    spies.push(['promises.open', t.mock.method(fs.promises, 'open')]);
    const c = client({ maxRetries: 0 });
    await c.get('API_KEY');
    await c.getAll();
    stub.fault({ status: 503 }, { status: 503 });
    await c.get('API_KEY');
    await c.getAll();
    await settle();
    const used = spies.filter(([, spy]) => spy.mock.callCount() > 0).map(([name]) => name);
    assert.deepEqual(used, []);
  });

  test('a client holding kept values prints none of them', async () => {
    const c = client({ maxRetries: 0 });
    await c.getAll();
    stub.fault({ status: 503 });
    await c.get('API_KEY');
    for (const text of [util.inspect(c, { showHidden: true, depth: Infinity }), JSON.stringify(c), util.inspect(events)]) {
      assert.ok(!text.includes('prod-api-key-value'), text);
      assert.ok(!text.includes(TOKEN), text);
    }
  });

  test('the error in a stale event is the SDK error of the failed refresh', async () => {
    const c = client({ maxRetries: 0 });
    await c.get('API_KEY');
    stub.fault({ status: 503 });
    await c.get('API_KEY');
    assert.ok(events[0].error instanceof CvsmError);
    assert.equal(events[0].error.status, 503);
    assert.equal(events[0].error.requestId, `req-${stub.requests.length}`);
  });
});
