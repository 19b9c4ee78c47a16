// This file owns the client-side cache: values keyed by environment and
// name, and whole GetAll results keyed by environment, each kept for the
// cache TTL. A zero TTL turns the cache off.

package cvsm

import (
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
	expires time.Time
}

type cachedAll struct {
	values  func() map[string]string
	expires time.Time
}

func sealString(s string) func() string { return func() string { return s } }

func sealMap(m map[string]string) func() map[string]string {
	return func() map[string]string { return m }
}

// cache is safe for concurrent use.
type cache struct {
	ttl time.Duration
	now func() time.Time

	mu     sync.Mutex
	values map[cacheKey]cachedValue
	all    map[string]cachedAll
}

func newCache(ttl time.Duration, now func() time.Time) *cache {
	return &cache{
		ttl:    ttl,
		now:    now,
		values: map[cacheKey]cachedValue{},
		all:    map[string]cachedAll{},
	}
}

// get returns the cached value of name in environment, if still fresh.
func (c *cache) get(environment, name string) (string, bool) {
	if c.ttl <= 0 {
		return "", false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	key := cacheKey{environment, name}
	e, ok := c.values[key]
	if !ok {
		return "", false
	}
	if !c.now().Before(e.expires) {
		delete(c.values, key)
		return "", false
	}
	return e.value(), true
}

// put caches one value.
func (c *cache) put(environment, name, value string) {
	if c.ttl <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.values[cacheKey{environment, name}] = cachedValue{sealString(value), c.now().Add(c.ttl)}
}

// getAll returns a copy of the cached GetAll result of environment, if
// still fresh.
func (c *cache) getAll(environment string) (map[string]string, bool) {
	if c.ttl <= 0 {
		return nil, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.all[environment]
	if !ok {
		return nil, false
	}
	if !c.now().Before(e.expires) {
		delete(c.all, environment)
		return nil, false
	}
	return copyMap(e.values()), true
}

// putAll caches a GetAll result and each of its values.
func (c *cache) putAll(environment string, values map[string]string) {
	if c.ttl <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	expires := c.now().Add(c.ttl)
	c.all[environment] = cachedAll{sealMap(copyMap(values)), expires}
	for name, value := range values {
		c.values[cacheKey{environment, name}] = cachedValue{sealString(value), expires}
	}
}

// clear empties the cache.
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
