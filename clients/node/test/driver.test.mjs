/**
 * driver.test: the conformance driver as the harness uses it: one process, JSON lines in and
 * out, error kinds from error classes (decryption included), environment ops, and exit 0 on
 * shutdown or end of input.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
const { StubServer, TOKEN, TEAM_SLUG, PROXY_VARIABLES } = require('./helpers/stub.js');
const DRIVER = fileURLToPath(new URL('../conformance/driver.mjs', import.meta.url));

let stub;
before(async () => {
  stub = await new StubServer().start();
});
after(async () => {
  await stub.close();
});

/** startDriver spawns the driver with no CVSM_* or proxy variables; `send` returns the next answer. */
function startDriver() {
  const env = Object.fromEntries(
    Object.entries(process.env).filter(([k]) => !k.startsWith('CVSM_') && !PROXY_VARIABLES.includes(k)),
  );
  const child = spawn(process.execPath, [DRIVER], { env, stdio: ['pipe', 'pipe', 'pipe'] });
  const lines = createInterface({ input: child.stdout });
  const waiting = [];
  const received = [];
  lines.on('line', (line) => {
    const next = waiting.shift();
    if (next) next(line);
    else received.push(line);
  });
  let nextId = 1;
  const exited = new Promise((resolve) => child.on('exit', (code) => resolve(code)));
  return {
    child,
    exited,
    async send(op, args) {
      const id = nextId++;
      const line = await new Promise((resolve) => {
        waiting.push(resolve);
        child.stdin.write(`${JSON.stringify(args === undefined ? { id, op } : { id, op, args })}\n`);
      });
      const answer = JSON.parse(line);
      assert.equal(answer.id, id);
      return answer;
    },
  };
}

test('a session: configuration, get, cache, not found, describe, inject, env ops, shutdown', async () => {
  const d = startDriver();
  try {
    let a = await d.send('new_client', { options: { base_url: stub.baseUrl, team: TEAM_SLUG } });
    assert.deepEqual(a, {
      id: 1,
      ok: false,
      error: {
        kind: 'configuration',
        message: 'CVSM_TOKEN is not set',
        status: null,
        retry_after: null,
        request_id: null,
        suggestion: null,
      },
    });
    a = await d.send('get', { name: 'API_KEY' });
    assert.equal(a.ok, false);

    a = await d.send('set_env', { set: { CVSM_TOKEN: TOKEN, CVSM_CACHE_TTL: '60' }, unset: [] });
    assert.deepEqual(a.result, {});
    a = await d.send('new_client', { options: { base_url: `${stub.baseUrl}/`, team: TEAM_SLUG, timeout: 2.5 } });
    assert.deepEqual(a.result, {
      config: {
        base_url: stub.baseUrl,
        team: TEAM_SLUG,
        environment: 'production',
        cache_ttl: 60,
        timeout: 2.5,
        max_retries: 2,
        stale_if_error: 0,
      },
    });

    stub.requests.length = 0;
    a = await d.send('get', { name: 'API_KEY' });
    assert.deepEqual(a.result, { value: 'prod-api-key-value' });
    a = await d.send('get', { name: 'API_KEY' });
    assert.deepEqual(a.result, { value: 'prod-api-key-value' });
    assert.equal(stub.requests.length, 1);
    a = await d.send('clear_cache', {});
    assert.deepEqual(a.result, {});
    await d.send('get', { name: 'API_KEY' });
    assert.equal(stub.requests.length, 2);

    a = await d.send('get', { name: 'api_key' });
    assert.equal(a.ok, false);
    assert.equal(a.error.kind, 'not_found');
    assert.equal(a.error.status, 404);
    assert.match(a.error.message, /did you mean "API_KEY"\?/);
    assert.equal(a.error.suggestion, 'API_KEY');
    assert.match(a.error.request_id, /^req-\d+$/);

    a = await d.send('describe', {});
    assert.match(a.result.text, /^Client \{/);
    assert.ok(!a.result.text.includes(TOKEN));
    assert.ok(!a.result.text.includes('prod-api-key-value'));

    a = await d.send('get_all', {});
    assert.equal(a.result.values.DATABASE_URL, 'postgres://prod-db-value');

    await d.send('set_env', { set: { API_KEY: 'local' }, unset: ['DATABASE_URL'] });
    a = await d.send('inject', {});
    assert.deepEqual(a.result, { names: ['API_KEY_OLD', 'DATABASE_URL'] });
    a = await d.send('get_env', { names: ['API_KEY', 'DATABASE_URL', 'NEVER_SET'] });
    assert.deepEqual(a.result.values, { API_KEY: 'local', DATABASE_URL: 'postgres://prod-db-value', NEVER_SET: null });
    a = await d.send('inject', { overwrite: true });
    assert.deepEqual(a.result, { names: ['API_KEY', 'API_KEY_OLD', 'DATABASE_URL'] });

    a = await d.send('frobnicate', {});
    assert.equal(a.error.kind, 'unsupported');

    a = await d.send('shutdown', {});
    assert.deepEqual(a, { id: a.id, ok: true, result: {} });
    assert.equal(await d.exited, 0);
  } finally {
    d.child.kill();
  }
});

test('error kinds come from the error classes, with status and retry_after', async () => {
  const d = startDriver();
  try {
    await d.send('new_client', {
      options: { token: TOKEN, base_url: stub.baseUrl, team: TEAM_SLUG, cache_ttl: 0, max_retries: 0 },
    });
    // Every fault hits the export, the one request of get_all.
    assert.equal((await d.send('get_all', {})).ok, true);
    const expected = [
      [{ status: 401 }, 'authentication', 401, null],
      [{ status: 403 }, 'permission_denied', 403, null],
      [{ status: 404 }, 'configuration', 404, null],
      [{ status: 400 }, 'configuration', 400, null],
      [{ status: 302, headers: { Location: '/elsewhere' } }, 'api', 302, null],
      [{ status: 200, body: [] }, 'network', null, null],
      [{ status: 429, headers: { 'Retry-After': '12' } }, 'rate_limited', 429, 12],
      [{ status: 503 }, 'api', 503, null],
      [{ destroy: true }, 'network', null, null],
    ];
    for (const [fault, kind, status, retryAfter] of expected) {
      stub.faults.length = 0;
      stub.fault(fault);
      const a = await d.send('get_all', {});
      assert.equal(a.ok, false, kind);
      assert.deepEqual(
        { kind: a.error.kind, status: a.error.status, retry_after: a.error.retry_after },
        { kind, status, retry_after: retryAfter },
      );
      assert.equal(typeof a.error.message, 'string');
      assert.deepEqual(Object.keys(a.error).sort(), ['kind', 'message', 'request_id', 'retry_after', 'status', 'suggestion']);
      if (fault.destroy) assert.equal(a.error.request_id, null);
      else assert.match(a.error.request_id, /^req-\d+$/);
      assert.equal(a.error.suggestion, null);
    }
    await d.send('new_client', { options: { token: TOKEN, base_url: stub.baseUrl, team: 'nobody' } });
    const a = await d.send('get', { name: 'API_KEY' });
    assert.equal(a.error.kind, 'configuration');
    assert.equal(a.error.status, 404);
    d.child.stdin.end();
    assert.equal(await d.exited, 0);
  } finally {
    d.child.kill();
  }
});

test('stale_if_error: passed through, reported in config, and stale: true only on a stale answer', async () => {
  const d = startDriver();
  try {
    let a = await d.send('new_client', {
      options: { token: TOKEN, base_url: stub.baseUrl, team: TEAM_SLUG, cache_ttl: 0, max_retries: 0, stale_if_error: 30 },
    });
    assert.equal(a.result.config.stale_if_error, 30);
    assert.equal(a.result.config.cache_ttl, 0);

    stub.faults.length = 0;
    a = await d.send('get', { name: 'API_KEY' });
    assert.deepEqual(a.result, { value: 'prod-api-key-value' });
    a = await d.send('get_all', {});
    assert.equal(Object.hasOwn(a.result, 'stale'), false);

    stub.fault({ status: 503 });
    a = await d.send('get', { name: 'API_KEY' });
    assert.deepEqual(a.result, { value: 'prod-api-key-value', stale: true });
    stub.fault({ destroy: true });
    a = await d.send('get_all', {});
    assert.equal(a.result.stale, true);
    assert.equal(a.result.values.API_KEY, 'prod-api-key-value');

    // The next answers are fresh again: no stale key.
    a = await d.send('get', { name: 'API_KEY' });
    assert.deepEqual(a.result, { value: 'prod-api-key-value' });
    a = await d.send('get_all', {});
    assert.equal(Object.hasOwn(a.result, 'stale'), false);

    // A 404 is never answered with a kept value.
    stub.fault({ status: 404 });
    a = await d.send('get', { name: 'API_KEY' });
    assert.equal(a.error.kind, 'not_found');

    await d.send('set_env', { set: { CVSM_TOKEN: TOKEN, CVSM_BASE_URL: stub.baseUrl, CVSM_TEAM: TEAM_SLUG, CVSM_STALE_IF_ERROR: '12' }, unset: [] });
    a = await d.send('new_client', { options: {} });
    assert.equal(a.result.config.stale_if_error, 12);
    await d.send('set_env', { set: { CVSM_STALE_IF_ERROR: 'soon' }, unset: [] });
    a = await d.send('new_client', { options: {} });
    assert.equal(a.error.kind, 'configuration');
    assert.match(a.error.message, /CVSM_STALE_IF_ERROR/);
    d.child.stdin.end();
    assert.equal(await d.exited, 0);
  } finally {
    d.child.kill();
  }
});

test('an end-to-end team: the token with its key part opens values, and kind decryption', async () => {
  const vectors = JSON.parse(
    readFileSync(fileURLToPath(new URL('../../../conformance/vectors/e2e.json', import.meta.url)), 'utf8'),
  );
  const sealed = vectors.values.find((v) => v.opens && v.environment === 'production' && v.name === 'DATABASE_URL');
  const elsewhere = vectors.values.find((v) => !v.opens && v.environment === 'staging');
  const recipient = vectors.recipients.find((r) => r.what === 'token');
  const e2e = await new StubServer({
    token: vectors.token.api_token,
    e2e: {
      team_id: vectors.team_id,
      key_version: vectors.key_version,
      wrapped_key: recipient.wrapped_key,
      // The token pins version 1: the link of version 2 leads to it.
      links: vectors.chain.links.filter((l) => l.key_version <= vectors.key_version).map(({ key_version, link }) => ({ key_version, link })),
    },
    secrets: { production: { DATABASE_URL: sealed.envelope }, staging: { [elsewhere.name]: elsewhere.envelope } },
  }).start();
  const d = startDriver();
  try {
    const options = { token: vectors.token.token, base_url: e2e.baseUrl, team: TEAM_SLUG };
    assert.equal((await d.send('new_client', { options })).ok, true);
    let a = await d.send('get', { name: 'DATABASE_URL' });
    assert.deepEqual(a.result, { value: sealed.value });
    assert.ok(!(await d.send('describe')).result.text.includes(vectors.token.private_key));
    await d.send('new_client', { options: { ...options, environment: 'staging' } });
    a = await d.send('get', { name: elsewhere.name });
    assert.equal(a.ok, false);
    assert.equal(a.error.kind, 'decryption');
    assert.equal(a.error.status, null);
    assert.match(a.error.message, /^secret "DATABASE_URL" in staging cannot be opened/);
    a = await d.send('new_client', { options: { ...options, token: `${vectors.token.api_token}.abc` } });
    assert.equal(a.error.kind, 'configuration');
    a = await d.send('new_client', { options: { ...options, token: vectors.v1_token } });
    assert.equal(a.error.kind, 'configuration');
    assert.match(a.error.message, /make a new token/);
    assert.ok(e2e.requests.every((r) => r.headers.authorization === `Bearer ${vectors.token.api_token}`));
    d.child.stdin.end();
    assert.equal(await d.exited, 0);
  } finally {
    d.child.kill();
    await e2e.close();
  }
});
