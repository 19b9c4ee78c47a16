'use strict';
/**
 * transport.test: what carries the requests: the proxy variables (read when the client is
 * created), a private CA (`caFile`, CVSM_CA_FILE) trusted instead of the system store, and the
 * `fetch` seam (bad CVSM_TIMEOUT and CVSM_MAX_RETRIES values are a conformance case).
 */

const { test, describe, before, after, beforeEach, afterEach } = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { Client, ConfigurationError, NetworkError, VERSION } = require('../lib');
const { SharedStub, TOKEN, TEAM_ID, cleanEnv, freePort } = require('./helpers/shared-stub');
const { pkiFile } = require('./helpers/pki');
const { ForwardProxy } = require('./helpers/proxy');

const CA = pkiFile('ca.pem');
const OTHER_CA = pkiFile('other-ca.pem');

let stub;
let tlsStub;
let proxy;

function client(options = {}) {
  return new Client({ token: TOKEN, baseUrl: stub.baseUrl, team: TEAM_ID, ...options });
}

function tlsClient(options = {}) {
  return new Client({ token: TOKEN, baseUrl: tlsStub.baseUrl, team: TEAM_ID, maxRetries: 0, ...options });
}

before(async () => {
  stub = await SharedStub.start();
  tlsStub = await SharedStub.start({ tls: true });
  proxy = await new ForwardProxy().start();
});

after(async () => {
  stub.stop();
  tlsStub.stop();
  await proxy.close();
  cleanEnv();
});

beforeEach(async () => {
  cleanEnv();
  await Promise.all([stub.reset(), tlsStub.reset()]);
  proxy.requests.length = 0;
});

afterEach(() => {
  cleanEnv();
});

describe('proxy variables (R7; the forms are the conformance cases proxy_from_environment and proxy_variable_forms)', () => {
  test('the variables are read when the client is created, not later', async () => {
    const direct = client();
    process.env.HTTP_PROXY = proxy.url;
    const proxied = client();
    delete process.env.HTTP_PROXY;
    await direct.getAll();
    assert.equal(proxy.requests.length, 0);
    await proxied.getAll();
    assert.equal(proxy.requests.length, 1);
  });

  test('a proxy without a scheme is an http proxy', async () => {
    process.env.HTTP_PROXY = `127.0.0.1:${proxy.port}`;
    await client().getAll();
    assert.equal(proxy.requests.length, 1);
  });

  test('HTTPS_PROXY tunnels an https base URL through CONNECT, the private CA still checked', async () => {
    process.env.HTTPS_PROXY = proxy.url;
    assert.equal(await tlsClient({ caFile: CA }).get('API_KEY'), 'prod-api-key-value');
    assert.equal(proxy.requests[0].method, 'CONNECT');
    assert.equal(proxy.requests[0].url, `127.0.0.1:${tlsStub.port}`);
    assert.equal((await tlsStub.requests()).length, 1);
    await assert.rejects(tlsClient({ caFile: OTHER_CA }).getAll(), NetworkError);
  });

  test('an invalid proxy URL is a ConfigurationError naming the variable, not its value', () => {
    process.env.https_proxy = 'http://user:s3cret@[::1';
    assert.throws(() => tlsClient(), (err) => {
      assert.ok(err instanceof ConfigurationError);
      assert.match(err.message, /^https_proxy /);
      assert.ok(!err.message.includes('s3cret'));
      return true;
    });
    process.env.HTTP_PROXY = 'ftp://proxy.example.test';
    assert.throws(() => client(), /HTTP_PROXY must be an http:\/\/ or https:\/\/ proxy URL/);
  });
});

describe('private CA (R7; trust through caFile and CVSM_CA_FILE, and only then, is the conformance case private_ca_trusted_through_ca_file)', () => {
  test('a bundle of several certificates is read', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cvsm-ca-'));
    try {
      const bundle = path.join(dir, 'bundle.pem');
      fs.writeFileSync(bundle, fs.readFileSync(OTHER_CA, 'utf8') + fs.readFileSync(CA, 'utf8'));
      assert.equal((await tlsClient({ caFile: bundle }).getAll()).API_KEY, 'prod-api-key-value');
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  test('a CA file that cannot be read or holds no certificate is a ConfigurationError at construction', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cvsm-ca-'));
    try {
      const empty = path.join(dir, 'empty.pem');
      fs.writeFileSync(empty, 'not a certificate\n');
      const broken = path.join(dir, 'broken.pem');
      fs.writeFileSync(broken, '-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n');
      for (const [file, pattern] of [
        [path.join(dir, 'missing.pem'), /cannot read the CA bundle .*ENOENT/],
        [dir, /cannot read the CA bundle .*EISDIR/],
        [empty, /holds no PEM certificate/],
        [broken, /cannot be read/],
      ]) {
        assert.throws(() => tlsClient({ caFile: file }), (err) => {
          assert.ok(err instanceof ConfigurationError, String(err));
          assert.match(err.message, /^option caFile: /);
          assert.match(err.message, pattern);
          return true;
        });
        process.env.CVSM_CA_FILE = file;
        assert.throws(() => tlsClient(), /^ConfigurationError: CVSM_CA_FILE: /);
        delete process.env.CVSM_CA_FILE;
      }
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('the fetch seam', () => {
  test('a caller fetch gets the URL and the init, and its answer is used', async () => {
    const calls = [];
    const myFetch = (url, init) => {
      calls.push({ url, init });
      return fetch(url, init);
    };
    assert.equal(await client({ fetch: myFetch }).get('API_KEY'), 'prod-api-key-value');
    assert.equal(calls.length, 1);
    const { url, init } = calls[0];
    assert.equal(url, `${stub.baseUrl}/teams/${TEAM_ID}/secrets/by-name/API_KEY?environment=production`);
    assert.equal(init.method, 'GET');
    assert.equal(init.redirect, 'manual');
    assert.ok(init.signal instanceof AbortSignal);
    assert.deepEqual(init.headers, {
      Authorization: `Bearer ${TOKEN}`,
      Accept: 'application/json',
      'User-Agent': `cvsm-node/${VERSION}`,
    });
  });

  test('a caller fetch owns the transport: the proxy variables are not applied', async () => {
    process.env.HTTP_PROXY = `http://127.0.0.1:${await freePort()}`;
    await client({ fetch: (url, init) => fetch(url, init) }).getAll();
    assert.equal((await stub.requests()).length, 1);
  });

  test('a caller fetch that throws is a NetworkError, retried', async () => {
    let calls = 0;
    let failures = 1;
    const flaky = (url, init) => {
      calls += 1;
      if (failures-- > 0) return Promise.reject(new TypeError('fetch failed', { cause: { code: 'ECONNRESET' } }));
      return fetch(url, init);
    };
    assert.equal((await client({ fetch: flaky }).getAll()).API_KEY, 'prod-api-key-value');
    assert.equal(calls, 2);
    failures = 1;
    await assert.rejects(client({ fetch: flaky, maxRetries: 0 }).getAll(), (err) => {
      assert.ok(err instanceof NetworkError);
      assert.match(err.message, /failed: ECONNRESET/);
      return true;
    });
  });

  test('fetch must be a function, and cannot be combined with a CA file', () => {
    assert.throws(() => client({ fetch: 'fetch' }), ConfigurationError);
    assert.throws(() => client({ fetch, caFile: CA }), /option caFile cannot be used with option fetch/);
    process.env.CVSM_CA_FILE = CA;
    assert.throws(() => client({ fetch }), /CVSM_CA_FILE cannot be used with option fetch/);
  });
});
