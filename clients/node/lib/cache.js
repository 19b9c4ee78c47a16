'use strict';
/**
 * cache: a small map whose entries expire a fixed number of seconds after they were stored,
 * measured on a monotonic clock. A TTL of 0 stores nothing.
 */

/** TtlCache keeps values for `ttlSeconds`; `now` returns milliseconds (monotonic by default). */
class TtlCache {
  #entries = new Map();
  #ttlMs;
  #now;

  constructor(ttlSeconds, now = () => performance.now()) {
    this.#ttlMs = ttlSeconds * 1000;
    this.#now = now;
  }

  /** get returns the live value stored under `key`, or undefined when absent or expired. */
  get(key) {
    const entry = this.#entries.get(key);
    if (entry === undefined) return undefined;
    if (this.#now() >= entry.expiresAt) {
      this.#entries.delete(key);
      return undefined;
    }
    return entry.value;
  }

  /** set stores `value` under `key` for the TTL; it does nothing when the TTL is 0. */
  set(key, value) {
    if (this.#ttlMs <= 0) return;
    this.#entries.set(key, { value, expiresAt: this.#now() + this.#ttlMs });
  }

  /** clear removes every entry. */
  clear() {
    this.#entries.clear();
  }

  /** size is the number of stored entries, expired ones included until they are read. */
  get size() {
    return this.#entries.size;
  }
}

module.exports = { TtlCache };
