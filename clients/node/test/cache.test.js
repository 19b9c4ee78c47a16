'use strict';
/** cache.test: TtlCache freshness and kept (stale-if-error) entries, with a fake clock. */

const { test } = require('node:test');
const assert = require('node:assert/strict');
const { TtlCache } = require('../lib/cache');

test('an entry is fresh exactly ttl seconds', () => {
  let now = 1000;
  const cache = new TtlCache(30, 0, () => now);
  cache.set('k', 'v');
  now += 29_999;
  assert.equal(cache.get('k'), 'v');
  now += 1;
  assert.equal(cache.get('k'), undefined);
  assert.equal(cache.size, 0);
});

test('an entry is kept ttl + stale seconds, fresh only for ttl', () => {
  let now = 500;
  const cache = new TtlCache(30, 60, () => now);
  cache.set('k', 'v');
  now += 30_000;
  assert.equal(cache.get('k'), undefined, 'no longer fresh');
  assert.deepEqual(cache.kept('k'), { value: 'v', age: 30 });
  now += 59_999;
  assert.deepEqual(cache.kept('k'), { value: 'v', age: 89.999 });
  now += 1;
  assert.equal(cache.kept('k'), undefined, 'past ttl + stale');
  assert.equal(cache.size, 0, 'and removed');
});

test('with ttl 0 a value is never fresh but kept for the stale time', () => {
  let now = 0;
  const cache = new TtlCache(0, 5, () => now);
  cache.set('k', 'v');
  assert.equal(cache.get('k'), undefined);
  now = 4_999;
  assert.deepEqual(cache.kept('k'), { value: 'v', age: 4.999 });
  now = 5_000;
  assert.equal(cache.kept('k'), undefined);
});

test('setting again restarts the clock', () => {
  let now = 0;
  const cache = new TtlCache(1, 1, () => now);
  cache.set('k', 'old');
  now = 1_500;
  cache.set('k', 'new');
  now = 2_400;
  assert.equal(cache.get('k'), 'new');
  now = 3_400;
  assert.deepEqual(cache.kept('k'), { value: 'new', age: 1.9 });
});

test('clear removes every entry, kept ones too', () => {
  let now = 0;
  const cache = new TtlCache(1, 60, () => now);
  cache.set('a', '1');
  cache.set('b', '2');
  now = 2_000;
  cache.clear();
  assert.equal(cache.get('a'), undefined);
  assert.equal(cache.kept('a'), undefined);
  assert.equal(cache.kept('b'), undefined);
});
