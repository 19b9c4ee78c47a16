'use strict';
/**
 * client.test: the Client against the shared stub API (conformance/stub.py): the cache's
 * returned objects, argument types, the backoff, configuration getters and what a printed client
 * may show. The rules every SDK shares are the conformance cases.
 */

const { test, describe, before, after, beforeEach } = require('node:test');
const assert = require('node:assert/strict');
const util = require('node:util');
const { Client, ConfigurationError } = require('../lib');
const { SharedStub, TOKEN, TEAM_SLUG, cleanEnv } = require('./helpers/shared-stub');

cleanEnv();

let stub;

function client(options = {}) {
  return new Client({ token: TOKEN, baseUrl: stub.baseUrl, team: TEAM_SLUG, ...options });
}

before(async () => {
  stub = await SharedStub.start();
});

after(() => stub.stop());

beforeEach(() => stub.reset());

describe('cache', () => {
  test('changing the object getAll returned does not change the cache', async () => {
    const c = client();
    const values = await c.getAll();
    values.API_KEY = 'tampered';
    assert.equal((await c.getAll()).API_KEY, 'prod-api-key-value');
  });
});

describe('errors', () => {
  test('get rejects a name that is not a string with a TypeError, without a request', async () => {
    await assert.rejects(client().get(42), TypeError);
    await assert.rejects(client().get(undefined), TypeError);
    assert.equal((await stub.requests()).length, 0);
  });
});

describe('retries', () => {
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

  test('the configuration getters are read-only', () => {
    const c = client();
    assert.throws(() => {
      c.cacheTtl = 99;
    }, TypeError);
    assert.equal(c.cacheTtl, 30);
  });

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

  test('the printed and serialised client show a base URL without its user and password', () => {
    const withUserinfo = stub.baseUrl.replace('://', '://cvsm-user:p4ss-must-not-show@');
    const c = client({ baseUrl: withUserinfo });
    const printed = [
      util.inspect(c),
      util.inspect(c, { showHidden: true, depth: Infinity }),
      util.format('%o %O %s %j', c, c, c, c),
      JSON.stringify(c),
      String(c),
    ];
    for (const text of printed) {
      assert.ok(!text.includes('p4ss-must-not-show'), text);
      assert.ok(!text.includes('cvsm-user'), text);
    }
    assert.equal(c.toJSON().baseUrl, stub.baseUrl.replace('://', '://***@'));
    assert.equal(c.baseUrl, withUserinfo);
  });

  test('a user and password in the base URL never reach fetch: only the Bearer token is sent', async () => {
    const urls = [];
    const recording = (url, init) => {
      urls.push(String(url));
      return fetch(url, init);
    };
    const c = client({ baseUrl: stub.baseUrl.replace('://', '://cvsm-user:p4ss-must-not-show@'), fetch: recording });
    assert.equal(await c.get('API_KEY'), 'prod-api-key-value');
    assert.deepEqual(urls.map((url) => url.startsWith(`${stub.baseUrl}/`)), [true]);
    const requests = await stub.requests();
    assert.equal(requests.length, 1);
    assert.equal(requests[0].headers.authorization, `Bearer ${TOKEN}`);
  });
});
