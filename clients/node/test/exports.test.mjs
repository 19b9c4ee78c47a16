/**
 * exports.test: the package loads by name from ESM (import) and CommonJS (require) through its
 * exports map, and both give the very same classes.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import * as esm from 'cvsm';
import esmDefault from 'cvsm';

const require = createRequire(import.meta.url);
const cjs = require('cvsm');

const NAMES = [
  'Client',
  'CvsmError',
  'ConfigurationError',
  'AuthenticationError',
  'PermissionDeniedError',
  'SecretNotFoundError',
  'RateLimitError',
  'ApiError',
  'NetworkError',
  'DecryptionError',
];

test('import and require resolve to the two entry files of the exports map', () => {
  // import.meta.resolve is synchronous from Node 20.6; older Node is covered by the next test,
  // since the CommonJS file's spread exports would not appear as ESM named exports.
  if (typeof import.meta.resolve === 'function') {
    assert.match(import.meta.resolve('cvsm'), /\/lib\/index\.mjs$/);
  }
  assert.match(require.resolve('cvsm'), /\/lib\/index\.js$/);
});

test('ESM named exports and the CommonJS exports are the same objects', () => {
  for (const name of NAMES) {
    assert.equal(typeof esm[name], 'function', name);
    assert.equal(esm[name], cjs[name], name);
    assert.equal(esmDefault[name], cjs[name], name);
  }
  assert.equal(esm.VERSION, '0.1.0');
});

test('every error class extends CvsmError and Error, and is named after itself', () => {
  for (const name of NAMES.filter((n) => n.endsWith('Error'))) {
    const err = new esm[name]('boom', { status: 418 });
    assert.ok(err instanceof esm.CvsmError, name);
    assert.ok(err instanceof Error, name);
    assert.equal(err.name, name);
    assert.equal(err.status, 418);
    assert.equal(err.requestId, null);
    assert.equal(err.suggestion, null);
    assert.equal(String(err), `${name}: boom`);
  }
  assert.equal(new esm.RateLimitError('slow down', { retryAfter: 3 }).status, 429);
  assert.equal(new esm.RateLimitError('slow down', { retryAfter: 3 }).retryAfter, 3);
  assert.equal(new esm.NetworkError('down').status, null);
  const found = new esm.SecretNotFoundError('absent', { requestId: 'req-9', suggestion: 'API_KEY' });
  assert.equal(found.requestId, 'req-9');
  assert.equal(found.suggestion, 'API_KEY');
  const limited = new esm.RateLimitError('slow down', { retryAfter: 1, requestId: 'req-8' });
  assert.deepEqual([limited.status, limited.retryAfter, limited.requestId], [429, 1, 'req-8']);
});

test('a client built from ESM raises the configuration error on a missing token', () => {
  const saved = process.env.CVSM_TOKEN;
  delete process.env.CVSM_TOKEN;
  try {
    assert.throws(
      () => new esm.Client({ baseUrl: 'http://127.0.0.1:9/api/v1', team: 'acme' }),
      (err) => err instanceof cjs.ConfigurationError && err.message === 'CVSM_TOKEN is not set',
    );
  } finally {
    if (saved !== undefined) process.env.CVSM_TOKEN = saved;
  }
});
