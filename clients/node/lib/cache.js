'use strict';
/**
 * cache: a small map whose entries are fresh for a fixed number of seconds after they were
 * stored, then kept a further number of seconds for stale-if-error (rule R14), measured on a
 * monotonic clock. It lives in memory only. With both times 0 it stores nothing.
 */

/**
 * Keeps values fresh for `ttlSeconds` and then kept for `staleSeconds` more; `now`
 * returns milliseconds (monotonic by default).
 */
class TtlCache {
  #entries = new Map();
  #freshMs;
  #keptMs;
  #now;

  constructor(ttlSeconds, staleSeconds = 0, now = () => performance.now()) {
    this.#freshMs = ttlSeconds * 1000;
    this.#keptMs = (ttlSeconds + staleSeconds) * 1000;
    this.#now = now;
  }

  /** Returns the fresh value stored under `key`, or undefined when absent or no longer fresh. */
  get(key) {
    const entry = this.#live(key);
    if (entry === undefined || entry.expired || this.#now() - entry.storedAt >= this.#freshMs) return undefined;
    return entry.value;
  }

  /**
   * Returns `{value, age}` (age in seconds since it was stored) for the value stored under
   * `key` while it is younger than ttl + stale seconds, fresh or not; else undefined.
   */
  kept(key) {
    const entry = this.#live(key);
    if (entry === undefined) return undefined;
    return { value: entry.value, age: (this.#now() - entry.storedAt) / 1000 };
  }

  /** Stores `value` under `key`; it does nothing when the ttl and the stale time are both 0. */
  set(key, value) {
    if (this.#keptMs <= 0) return;
    this.#entries.set(key, { value, storedAt: this.#now() });
  }

  /**
   * Makes the entry under `key` stop being fresh at once (a live client's change); it is still
   * kept for stale-if-error until ttl + stale seconds after it was stored. Returns whether a
   * fresh entry was there.
   */
  expire(key) {
    const entry = this.#live(key);
    if (entry === undefined || entry.expired) return false;
    if (this.#keptMs - this.#freshMs <= 0) {
      this.#entries.delete(key);
    } else {
      entry.expired = true;
    }
    return this.#now() - entry.storedAt < this.#freshMs;
  }

  /** Returns whether a fresh entry is stored under `key`. */
  has(key) {
    return this.get(key) !== undefined;
  }

  /** Returns the keys of the fresh entries. */
  freshKeys() {
    return [...this.#entries.keys()].filter((key) => this.has(key));
  }

  /** Removes every entry, kept ones included. */
  clear() {
    this.#entries.clear();
  }

  /** The number of stored entries, including those past their time until they are read. */
  get size() {
    return this.#entries.size;
  }

  /** Returns the entry under `key` unless it is past ttl + stale, which it removes. */
  #live(key) {
    const entry = this.#entries.get(key);
    if (entry === undefined) return undefined;
    if (this.#now() - entry.storedAt >= this.#keptMs) {
      this.#entries.delete(key);
      return undefined;
    }
    return entry;
  }
}

module.exports = { TtlCache };
