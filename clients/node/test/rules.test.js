'use strict';
/**
 * rules.test: the decided behaviour of conformance/PROTOCOL.md (rules R1-R13), each against the
 * in-process stub API.
 */

const { test, describe, before, after, beforeEach } = require('node:test');
const assert = require('node:assert/strict');
const util = require('node:util');
const {
  Client,
  ConfigurationError,
  SecretNotFoundError,
  RateLimitError,
  ApiError,
  NetworkError,
} = require('../lib');
const { parseRetryAfter } = require('../lib/retry-after');
const { StubServer, TOKEN, TEAM_ID, TEAM_SLUG, cleanEnv } = require('./helpers/stub');

cleanEnv();

let stub;

function client(options = {}) {
  return new Client({ token: TOKEN, baseUrl: stub.baseUrl, team: TEAM_ID, ...options });
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

describe('R1: a timeout bounds the whole attempt', () => {
  test('a body dripped one byte at a time is a NetworkError after timeout per attempt', async () => {
    stub.fault({ dripMs: 40 }, { dripMs: 40 });
    const started = performance.now();
    await assert.rejects(client({ timeout: 0.3, maxRetries: 1 }).getAll(), (err) => {
      assert.ok(err instanceof NetworkError, String(err));
      assert.equal(err.status, null);
      assert.match(err.message, /timed out after 0\.3s/);
      return true;
    });
    const elapsed = performance.now() - started;
    // two attempts of 0.3 s and one backoff below 0.1 s; the drip alone would take > 1 s each.
    assert.ok(elapsed >= 600 && elapsed < 1000, `${elapsed} ms`);
    assert.equal(stub.requests.length, 2);
  });

  test('a fetch that ignores its signal is still cut off at the timeout', async () => {
    const never = () => new Promise(() => {});
    const started = performance.now();
    await assert.rejects(client({ fetch: never, timeout: 0.2, maxRetries: 0 }).getAll(), NetworkError);
    assert.ok(performance.now() - started < 500);
  });
});

describe('R2: answers of any size, fetched once', () => {
  test('an export over 10 MiB is read in one request', async () => {
    const big = {};
    for (let i = 0; i < 1100; i++) big[`BIG_${i}`] = String(i % 10).repeat(10_000);
    const local = await new StubServer({ secrets: { production: big } }).start();
    try {
      const c = new Client({ token: TOKEN, baseUrl: local.baseUrl, team: TEAM_ID });
      const values = await c.getAll();
      assert.equal(Object.keys(values).length, 1100);
      assert.equal(values.BIG_1099, '9'.repeat(10_000));
      assert.equal(await c.get('BIG_7'), '7'.repeat(10_000));
      assert.equal(local.requests.length, 1);
    } finally {
      await local.close();
    }
  });
});

describe('R3: the answer shape is checked, and an unreadable answer is retried', () => {
  const shapes = {
    export: [null, [], 42, '"text"', { A: null }, { A: 1 }, { A: ['x'] }, { A: { b: 'c' } }],
    listing: [{}, { secrets: null }, { secrets: {} }, [], null],
    value: [{}, { value: null }, { value: 42 }, { secret: {} }],
    teams: [{}, { teams: null }, { teams: 'acme' }, []],
  };
  const calls = {
    export: (c) => c.getAll(),
    listing: (c) => c.get('API_KEY'),
    // the listing answers normally, then the value answer is faulted
    value: (c) => c.get('API_KEY'),
    teams: (c) => c.get('API_KEY'),
  };
  for (const [what, bodies] of Object.entries(shapes)) {
    for (const body of bodies) {
      test(`a ${what} answer ${JSON.stringify(body)} is a NetworkError after the retries`, async () => {
        const text = typeof body === 'string' ? body : JSON.stringify(body);
        const lead = what === 'value' ? [{ pass: true }] : [];
        const bad = { status: 200, body: text };
        stub.fault(...lead, bad, bad, bad);
        const c = client({ team: what === 'teams' ? TEAM_SLUG : TEAM_ID, cacheTtl: 0 });
        await assert.rejects(calls[what](c), (err) => {
          assert.ok(err instanceof NetworkError, String(err));
          assert.equal(err.status, null);
          assert.match(err.message, /unreadable response/);
          return true;
        });
        assert.equal(stub.requests.length, lead.length + 3);
      });
    }
  }

  test('one unreadable answer, then a good one, succeeds', async () => {
    stub.fault({ status: 200, body: { API_KEY: null } });
    assert.equal((await client().getAll()).API_KEY, 'prod-api-key-value');
    assert.equal(stub.requests.length, 2);
  });

  test('an empty export is a valid answer', async () => {
    stub.fault({ status: 200, body: {} });
    assert.deepEqual(await client().getAll(), {});
  });
});

describe('R4: Retry-After', () => {
  const now = Date.UTC(2024, 0, 1, 12, 0, 0, 250);
  const forms = [
    ['0', 0],
    ['7', 7],
    [' 120 ', 120],
    ['Mon, 01 Jan 2024 12:00:10 GMT', 10],
    ['Mon, 01 Jan 2024 12:00:00 GMT', 0],
    ['Sun, 31 Dec 2023 23:59:59 GMT', 0],
    ['Monday, 01-Jan-24 12:00:05 GMT', 5],
    ['Mon Jan  1 12:00:03 2024', 3],
    ['Mon, 01 Jan 2024 12:00:10 +0000', null],
    ['Mon, 32 Jan 2024 12:00:10 GMT', null],
    ['-1', null],
    ['1.5', null],
    ['+3', null],
    ['soon', null],
    ['', null],
    [null, null],
  ];
  for (const [header, expected] of forms) {
    test(`Retry-After ${JSON.stringify(header)} is ${expected}`, () => {
      assert.equal(parseRetryAfter(header, now), expected);
    });
  }

  test('a date is rounded up to whole seconds from now', () => {
    // 9.75 s ahead of `now` becomes 10.
    assert.equal(parseRetryAfter('Mon, 01 Jan 2024 12:00:10 GMT', now), 10);
    assert.equal(parseRetryAfter('Mon, 01 Jan 2024 12:00:01 GMT', now), 1);
  });

  test('a 429 with an HTTP date carries the seconds until then', async () => {
    const in30 = new Date(Date.now() + 30_000).toUTCString();
    stub.fault({ status: 429, headers: { 'Retry-After': in30 } });
    await assert.rejects(client().getAll(), (err) => {
      assert.ok(err instanceof RateLimitError);
      assert.ok(err.retryAfter >= 29 && err.retryAfter <= 30, String(err.retryAfter));
      return true;
    });
  });

  test('a 429 with Retry-After 0 carries 0, and garbage carries null', async () => {
    stub.fault({ status: 429, headers: { 'Retry-After': '0' } }, { status: 429, headers: { 'Retry-After': 'later' } });
    await assert.rejects(client().getAll(), (err) => err.retryAfter === 0);
    await assert.rejects(client().getAll(), (err) => err.retryAfter === null);
  });
});

describe('R5: redirects are not followed', () => {
  for (const status of [301, 302, 303, 307, 308]) {
    test(`a ${status} is an ApiError with its status, and the Location is never asked`, async () => {
      stub.fault({ status, body: '', headers: { Location: `${stub.baseUrl}/teams` } });
      await assert.rejects(client().getAll(), (err) => {
        assert.ok(err instanceof ApiError, String(err));
        assert.equal(err.status, status);
        assert.match(err.message, new RegExp(`^${status}: `));
        return true;
      });
      assert.equal(stub.requests.length, 1);
    });
  }
});

describe('R6: tokens from files', () => {
  const saved = process.env.CVSM_TOKEN;
  after(() => {
    if (saved === undefined) delete process.env.CVSM_TOKEN;
    else process.env.CVSM_TOKEN = saved;
  });

  for (const padded of [`${TOKEN}\n`, `${TOKEN}\r\n`, ` \t${TOKEN} \n\n`]) {
    test(`the token ${JSON.stringify(padded.replace(TOKEN, 'TOKEN'))} is trimmed, as option and variable`, async () => {
      assert.equal(await client({ token: padded }).get('API_KEY'), 'prod-api-key-value');
      process.env.CVSM_TOKEN = padded;
      const c = new Client({ baseUrl: stub.baseUrl, team: TEAM_ID });
      assert.equal(await c.get('DATABASE_URL'), 'postgres://prod-db-value');
      delete process.env.CVSM_TOKEN;
      for (const r of stub.requests) assert.equal(r.headers.authorization, `Bearer ${TOKEN}`);
    });
  }

  for (const bad of [`${TOKEN}\u0000x`, `cvsm_a b`, `cvsm_a\tb`, `cvsm_a\nb`, `cvsm_\u0007`, 'cvsm_é', `cvsm_\u00a0x`, `${TOKEN}\u007f`]) {
    test(`the token ${JSON.stringify(bad.replace(TOKEN, 'TOKEN'))} is a ConfigurationError without the token`, () => {
      const ways = [
        () => client({ token: bad }),
        () => {
          process.env.CVSM_TOKEN = bad;
          try {
            return new Client({ baseUrl: stub.baseUrl, team: TEAM_ID });
          } finally {
            delete process.env.CVSM_TOKEN;
          }
        },
      ];
      // No environment can hold a NUL: that token only comes as an option.
      for (const make of bad.includes('\u0000') ? ways.slice(0, 1) : ways) {
        assert.throws(make, (err) => {
          assert.ok(err instanceof ConfigurationError, String(err));
          assert.match(err.message, /CVSM_TOKEN/);
          assert.ok(!err.message.includes(bad.trim()), err.message);
          assert.ok(!err.message.includes('cvsm_'), err.message);
          return true;
        });
      }
      assert.equal(stub.requests.length, 0);
    });
  }

  test('a token of whitespace only counts as unset', () => {
    assert.throws(() => client({ token: ' \n' }), /CVSM_TOKEN is not set/);
  });
});

describe('R8: inject is all or nothing', () => {
  const NAMES = ['AAA_FIRST', 'BAD_VALUE', 'ZZZ_LAST', 'API_KEY', 'DATABASE_URL', 'API_KEY_OLD'];
  beforeEach(() => {
    for (const n of NAMES) delete process.env[n];
  });
  after(() => {
    for (const n of NAMES) delete process.env[n];
  });

  test('a value holding NUL is a ConfigurationError naming the secret, and nothing is set', async () => {
    stub.fault({ status: 200, body: { AAA_FIRST: 'one', BAD_VALUE: 'se\u0000cret-part', ZZZ_LAST: 'three' } });
    await assert.rejects(client().inject(), (err) => {
      assert.ok(err instanceof ConfigurationError, String(err));
      assert.match(err.message, /"BAD_VALUE"/);
      assert.match(err.message, /NUL/);
      assert.ok(!err.message.includes('cret-part'), err.message);
      return true;
    });
    for (const n of ['AAA_FIRST', 'BAD_VALUE', 'ZZZ_LAST']) assert.equal(process.env[n], undefined, n);
  });

  for (const name of ['1ABC', 'A-B', 'A=B', 'A B', 'É']) {
    test(`a name ${JSON.stringify(name)} is a ConfigurationError naming it, and nothing is set`, async () => {
      stub.fault({ status: 200, body: { AAA_FIRST: 'one', [name]: 'v', ZZZ_LAST: 'three' } });
      await assert.rejects(client().inject(), (err) => {
        assert.ok(err instanceof ConfigurationError, String(err));
        assert.ok(err.message.includes(JSON.stringify(name)), err.message);
        return true;
      });
      assert.equal(process.env.AAA_FIRST, undefined);
      assert.equal(process.env.ZZZ_LAST, undefined);
    });
  }

  test('a bad value under a name that is kept (already set, no overwrite) is not an error', async () => {
    process.env.BAD_VALUE = 'local';
    stub.fault({ status: 200, body: { AAA_FIRST: 'one', BAD_VALUE: 'x\u0000y' } });
    assert.deepEqual(await client().inject(), ['AAA_FIRST']);
    assert.equal(process.env.BAD_VALUE, 'local');
  });

  test('with overwrite, the same bad value is an error and nothing is set', async () => {
    process.env.BAD_VALUE = 'local';
    stub.fault({ status: 200, body: { AAA_FIRST: 'one', BAD_VALUE: 'x\u0000y' } });
    await assert.rejects(client().inject({ overwrite: true }), ConfigurationError);
    assert.equal(process.env.AAA_FIRST, undefined);
    assert.equal(process.env.BAD_VALUE, 'local');
  });
});

describe('R9: a wrong base URL, team or environment is a configuration error', () => {
  const cases = [
    ['a 404 to GET /teams', TEAM_SLUG, (c) => c.get('API_KEY'), [], 404],
    ['a 404 to the listing', TEAM_ID, (c) => c.get('API_KEY'), [], 404],
    ['a 404 to the export', TEAM_ID, (c) => c.getAll(), [], 404],
    ['a 400 to the listing', TEAM_ID, (c) => c.get('API_KEY'), [], 400],
    ['a 400 to the export', TEAM_ID, (c) => c.getAll(), [], 400],
  ];
  for (const [what, team, call, lead, status] of cases) {
    test(`${what} is a ConfigurationError with status ${status} and the request id`, async () => {
      stub.fault(...lead, { status, body: { error: 'nope' } });
      await assert.rejects(call(client({ team })), (err) => {
        assert.ok(err instanceof ConfigurationError, String(err));
        assert.equal(err.status, status);
        assert.equal(err.requestId, 'req-1');
        assert.match(err.message, new RegExp(`^${status}: nope; check the `));
        return true;
      });
      assert.equal(stub.requests.length, 1);
    });
  }

  test('a 400 to GET /teams stays an ApiError', async () => {
    stub.fault({ status: 400 });
    await assert.rejects(client({ team: TEAM_SLUG }).get('API_KEY'), (err) => err instanceof ApiError && err.status === 400);
  });

  test('a 404 to the value request (deleted meanwhile) stays SecretNotFoundError', async () => {
    stub.fault({ pass: true }, { status: 404, body: { error: 'rahasia tidak ditemukan' } });
    await assert.rejects(client().get('API_KEY'), (err) => {
      assert.ok(err instanceof SecretNotFoundError, String(err));
      assert.equal(err.status, 404);
      assert.equal(err.requestId, 'req-2');
      return true;
    });
  });

  test('the real cases: a base URL without /api/v1, an unknown team id, a rejected environment', async () => {
    const root = stub.baseUrl.replace(/\/api\/v1$/, '');
    await assert.rejects(client({ baseUrl: root, team: TEAM_SLUG }).get('API_KEY'), (err) => err instanceof ConfigurationError && err.status === 404);
    await assert.rejects(client({ team: '00000000-0000-4000-8000-00000000dead' }).getAll(), (err) => err instanceof ConfigurationError && err.status === 404);
  });
});

describe('R10: names', () => {
  for (const name of ['', '1ABC', 'A-B', 'A B', 'A.B', 'É', 'A\u0000', 'A'.repeat(256), '../teams']) {
    test(`get(${JSON.stringify(name.length > 20 ? `${name.slice(0, 8)}…` : name)}) is SecretNotFoundError without a request`, async () => {
      await assert.rejects(client().get(name), (err) => {
        assert.ok(err instanceof SecretNotFoundError, String(err));
        assert.equal(err.status, null);
        assert.equal(err.requestId, null);
        assert.match(err.message, /is not a valid secret name/);
        return true;
      });
      assert.equal(stub.requests.length, 0);
    });
  }

  test('a name of 255 characters is valid and asked for', async () => {
    await assert.rejects(client().get(`_${'a'.repeat(254)}`), (err) => {
      assert.ok(err instanceof SecretNotFoundError);
      assert.match(err.message, /not found in production/);
      return true;
    });
    assert.equal(stub.requests.length, 1);
  });
});

describe('R11: what an error carries', () => {
  test('a name absent from the listing carries the listing request id and no suggestion', async () => {
    await assert.rejects(client().get('MISSING'), (err) => {
      assert.ok(err instanceof SecretNotFoundError);
      assert.equal(err.requestId, 'req-1');
      assert.equal(err.suggestion, null);
      return true;
    });
  });

  test('a name that differs only in case carries the suggestion', async () => {
    await assert.rejects(client().get('api_key'), (err) => {
      assert.ok(err instanceof SecretNotFoundError);
      assert.equal(err.suggestion, 'API_KEY');
      assert.equal(err.requestId, 'req-1');
      assert.match(err.message, /did you mean "API_KEY"\?$/);
      return true;
    });
  });

  test('a 429 and a 5xx after retries carry the request id of the answer they came from', async () => {
    stub.fault({ status: 429, headers: { 'Retry-After': '3' } });
    await assert.rejects(client().getAll(), (err) => err instanceof RateLimitError && err.requestId === 'req-1' && err.retryAfter === 3);
    stub.requests.length = 0;
    stub.fault({ status: 503 }, { status: 503 }, { status: 503 });
    await assert.rejects(client().getAll(), (err) => err instanceof ApiError && err.requestId === 'req-3');
  });

  test('an error without an answer carries no request id', async () => {
    stub.fault({ destroy: true });
    await assert.rejects(client({ maxRetries: 0 }).getAll(), (err) => {
      assert.ok(err instanceof NetworkError);
      assert.equal(err.requestId, null);
      assert.equal(err.suggestion, null);
      assert.equal(err.status, null);
      return true;
    });
  });

  test('the fields show in util.inspect of the error', async () => {
    await assert.rejects(client().get('api_key'), (err) => {
      const text = util.inspect(err);
      assert.match(text, /requestId: 'req-1'/);
      assert.match(text, /suggestion: 'API_KEY'/);
      return true;
    });
  });
});
