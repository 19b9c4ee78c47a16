'use strict';
/** cache.test: TtlCache expiry with a fake clock. */

const { test } = require('node:test');
const assert = require('node:assert/strict');
const { TtlCache } = require('../lib/cache');

test('an entry lives exactly ttl seconds', () => {
  let now = 1000;
  const cache = new TtlCache(30, () => now);
  cache.set('k', 'v');
  now += 29_999;
  assert.equal(cache.get('k'), 'v');
  now += 1;
  assert.equal(cache.get('k'), undefined);
  assert.equal(cache.size, 0);
});

test('ttl 0 stores nothing', () => {
  const cache = new TtlCache(0, () => 0);
  cache.set('k', 'v');
  assert.equal(cache.size, 0);
  assert.equal(cache.get('k'), undefined);
});

test('clear removes every entry', () => {
  const cache = new TtlCache(30, () => 0);
  cache.set('a', '1');
  cache.set('b', '2');
  cache.clear();
  assert.equal(cache.get('a'), undefined);
  assert.equal(cache.get('b'), undefined);
});
