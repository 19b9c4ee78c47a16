// This file owns the client-side cache: values keyed by environment and
// name, and whole GetAll results keyed by environment. An entry is fresh
// for the cache TTL after it was fetched, then kept for the stale-if-error
// time (rule R14), during which it is served only when a refresh fails. A
// zero TTL and a zero stale-if-error time turn the cache off.

package cvsm

import (
	"math"
	"sync"
	"time"
)

type cacheKey struct {
	environment string
	name        string
}

// Cached values are held in closures, like the token, so that printing a
// structure that (indirectly) holds the client never reveals them.
type cachedValue struct {
	value   func() string
	fetched time.Time
	warned  bool // the stale warning for this value was logged
}

type cachedAll struct {
	values  func() map[string]string
	fetched time.Time
	warned  bool
}

func sealString(s string) func() string { return func() string { return s } }

func sealMap(m map[string]string) func() map[string]string {
	return func() map[string]string { return m }
}

// cache is safe for concurrent use.
type cache struct {
	ttl  time.Duration // how long an entry is fresh
	keep time.Duration // how long after the TTL it is kept for stale-if-error
	now  func() time.Time

	mu     sync.Mutex
	values map[cacheKey]*cachedValue
	all    map[string]*cachedAll
}

func newCache(ttl, keep time.Duration, now func() time.Time) *cache {
	return &cache{
		ttl:    ttl,
		keep:   keep,
		now:    now,
		values: map[cacheKey]*cachedValue{},
		all:    map[string]*cachedAll{},
	}
}

// enabled reports whether anything is stored at all.
func (c *cache) enabled() bool { return c.ttl > 0 || c.keep > 0 }

// bound is how long after it was fetched an entry may still be served:
// stale-if-error adds to the TTL (saturating, so huge settings do not wrap).
func (c *cache) bound() time.Duration {
	if c.ttl > math.MaxInt64-c.keep {
		return math.MaxInt64
	}
	return c.ttl + c.keep
}

// staleness says how an entry fetched at fetched stands now.
type staleness int

const (
	fresh   staleness = iota // younger than the TTL: served without a request
	kept                     // past the TTL, within the bound: served only if a refresh fails
	expired                  // past the bound: dropped
)

func (c *cache) state(fetched time.Time) (staleness, time.Duration) {
	age := c.now().Sub(fetched)
	switch {
	case age < c.ttl:
		return fresh, age
	case age < c.bound():
		return kept, age
	default:
		return expired, age
	}
}

// get returns the cached value of name in environment and its age, if
// still fresh.
func (c *cache) get(environment, name string) (string, time.Duration, bool) {
	if !c.enabled() {
		return "", 0, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	key := cacheKey{environment, name}
	e, ok := c.values[key]
	if !ok {
		return "", 0, false
	}
	st, age := c.state(e.fetched)
	if st == expired {
		delete(c.values, key)
	}
	if st != fresh {
		return "", 0, false
	}
	return e.value(), age, true
}

// getKept returns the cached value of name in environment and its age, if
// it is fresh or kept for stale-if-error. first is true the first time a
// given kept value is returned this way, for the warning logged once.
func (c *cache) getKept(environment, name string) (value string, age time.Duration, first, ok bool) {
	if !c.enabled() {
		return "", 0, false, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	key := cacheKey{environment, name}
	e, found := c.values[key]
	if !found {
		return "", 0, false, false
	}
	st, age := c.state(e.fetched)
	if st == expired {
		delete(c.values, key)
		return "", 0, false, false
	}
	first = !e.warned
	e.warned = true
	return e.value(), age, first, true
}

// put caches one value, fetched now.
func (c *cache) put(environment, name, value string) {
	if !c.enabled() {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.values[cacheKey{environment, name}] = &cachedValue{value: sealString(value), fetched: c.now()}
}

// forget drops the value of one name, for a secret the server says is gone.
func (c *cache) forget(environment, name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.values, cacheKey{environment, name})
}

// getAll returns a copy of the cached GetAll result of environment and its
// age, if still fresh.
func (c *cache) getAll(environment string) (map[string]string, time.Duration, bool) {
	if !c.enabled() {
		return nil, 0, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.all[environment]
	if !ok {
		return nil, 0, false
	}
	st, age := c.state(e.fetched)
	if st == expired {
		delete(c.all, environment)
	}
	if st != fresh {
		return nil, 0, false
	}
	return copyMap(e.values()), age, true
}

// getAllKept is getKept for a GetAll result.
func (c *cache) getAllKept(environment string) (values map[string]string, age time.Duration, first, ok bool) {
	if !c.enabled() {
		return nil, 0, false, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, found := c.all[environment]
	if !found {
		return nil, 0, false, false
	}
	st, age := c.state(e.fetched)
	if st == expired {
		delete(c.all, environment)
		return nil, 0, false, false
	}
	first = !e.warned
	e.warned = true
	return copyMap(e.values()), age, first, true
}

// putAll caches a GetAll result, fetched now, and each of its values.
func (c *cache) putAll(environment string, values map[string]string) {
	if !c.enabled() {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	fetched := c.now()
	c.all[environment] = &cachedAll{values: sealMap(copyMap(values)), fetched: fetched}
	for name, value := range values {
		c.values[cacheKey{environment, name}] = &cachedValue{value: sealString(value), fetched: fetched}
	}
	// Sweep the values of names the export no longer holds once they are
	// past the bound, so a long-lived client does not keep them for ever.
	for key, e := range c.values {
		if key.environment == environment {
			if st, _ := c.state(e.fetched); st == expired {
				delete(c.values, key)
			}
		}
	}
}

// clear empties the cache, kept values included.
func (c *cache) clear() {
	c.mu.Lock()
	defer c.mu.Unlock()
	clear(c.values)
	clear(c.all)
}

func copyMap(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
