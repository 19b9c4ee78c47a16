// This file owns the client-side cache: values keyed by environment and
// name, and whole GetAll results keyed by environment. An entry is fresh
// for the cache TTL after it was fetched, then kept for the stale-if-error
// time (rule R14), during which it is served only when a refresh fails. A
// zero TTL and a zero stale-if-error time turn the cache off.
//
// A live client (Options.Live, rule R16) also tells the cache what its
// change stream says: a snapshot of every name's current version when the
// stream (re)connects, and each change after. A value whose secret changed
// stops being fresh at once (it is still kept for stale-if-error), and a
// fetch that began before the change stores nothing (see mark). Each entry
// remembers the version it holds when that is known (the read by name says
// it; a value fetched while the stream is up holds at least the version the
// stream last announced), so a reconnection's snapshot drops only what
// changed meanwhile.

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
	version int  // the version it holds (at least); 0: unknown
	dropped bool // the change stream said it changed: kept for stale-if-error only
}

type cachedAll struct {
	values  func() map[string]string
	fetched time.Time
	warned  bool
	dropped bool
}

// mark is when a fetch began; see cache.mark.
type mark struct {
	gen   uint64 // clears so far
	stamp uint64 // changes applied so far
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

	// What the change stream said (live clients only).
	gen     uint64            // counts clears: a fetch begun before one stores nothing
	stamp   uint64            // counts the changes applied
	changed map[string]uint64 // name -> the stamp of its last change
	latest  map[string]int    // name -> version, from the stream; nil before a snapshot
}

func newCache(ttl, keep time.Duration, now func() time.Time) *cache {
	return &cache{
		ttl:     ttl,
		keep:    keep,
		now:     now,
		values:  map[cacheKey]*cachedValue{},
		all:     map[string]*cachedAll{},
		changed: map[string]uint64{},
	}
}

// mark returns when a fetch begins: the fetch stores nothing if the cache
// is cleared, or (for its name; for GetAll any name) a change arrives,
// before it ends.
func (c *cache) mark() mark {
	c.mu.Lock()
	defer c.mu.Unlock()
	return mark{c.gen, c.stamp}
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
	if st != fresh || e.dropped {
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

// put caches one value, fetched now by a read that began at m; version is
// the one the answer said it is (0: unknown). A read that a clear, or a
// change of its name, overtook stores nothing, unless it says it holds at
// least the version the stream announced.
func (c *cache) put(environment, name, value string, m mark, version int) {
	if !c.enabled() {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if m.gen != c.gen {
		return
	}
	latest, announced := c.latest[name]
	if version > 0 && announced {
		if version < latest {
			return // older than what the stream already announced
		}
	} else if c.changed[name] > m.stamp {
		return // it changed while this was read: what was read may be older
	}
	held := version
	if held == 0 && announced {
		held = latest
	}
	c.values[cacheKey{environment, name}] = &cachedValue{value: sealString(value), fetched: c.now(), version: held}
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
	if st != fresh || e.dropped {
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

// putAll caches a GetAll result, fetched now by a call that began at m,
// and each of its values; a clear or any change since m stores nothing.
func (c *cache) putAll(environment string, values map[string]string, m mark) {
	if !c.enabled() {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if m.gen != c.gen || c.stamp > m.stamp {
		return
	}
	fetched := c.now()
	c.all[environment] = &cachedAll{values: sealMap(copyMap(values)), fetched: fetched}
	for name, value := range values {
		c.values[cacheKey{environment, name}] = &cachedValue{value: sealString(value), fetched: fetched, version: c.latest[name]}
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

// clear empties the cache, kept values included; a fetch under way stores
// nothing.
func (c *cache) clear() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	clear(c.values)
	clear(c.all)
}

// snapshot takes the change stream's snapshot of environment (every name's
// current version, on each connect): an entry whose version is unknown or
// differs stops being fresh, and so does the GetAll result unless every name
// of it is still current. It returns how many entries it dropped.
func (c *cache) snapshot(environment string, versions map[string]int) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	before := c.latest
	c.latest = make(map[string]int, len(versions))
	for name, v := range versions {
		c.latest[name] = v
	}
	c.stamp++
	// A fetch under way may have read a value older than this: it stores nothing.
	for name, v := range versions {
		if was, ok := before[name]; before == nil || !ok || was != v {
			c.changed[name] = c.stamp
		}
	}
	for name := range before {
		if _, ok := versions[name]; !ok {
			c.changed[name] = c.stamp
		}
	}
	dropped := map[string]bool{}
	for key, e := range c.values {
		if key.environment != environment || e.dropped {
			continue
		}
		if v, ok := versions[key.name]; !ok || e.version == 0 || e.version != v {
			e.dropped, e.version = true, 0
			c.changed[key.name] = c.stamp
			dropped[key.name] = true
		}
	}
	if a := c.all[environment]; a != nil && !a.dropped {
		values := a.values()
		same := len(values) == len(versions)
		for name := range values {
			if _, ok := versions[name]; !ok || dropped[name] {
				same = false
			}
		}
		a.dropped = !same
	}
	return len(dropped)
}

// change takes a change event of environment: name is now at version
// (deleted: gone). Its entry stops being fresh unless it already holds that
// version; the GetAll result always does (a new name changes it). It
// reports whether an entry was dropped.
func (c *cache) change(environment, name string, version int, deleted bool) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.latest != nil {
		if deleted {
			delete(c.latest, name)
		} else {
			c.latest[name] = version
		}
	}
	c.stamp++
	if a := c.all[environment]; a != nil {
		a.dropped = true
	}
	e := c.values[cacheKey{environment, name}]
	if !deleted && e != nil && !e.dropped && e.version == version {
		return false
	}
	c.changed[name] = c.stamp
	if e == nil || e.dropped {
		return false
	}
	e.dropped, e.version = true, 0
	return true
}

// streamLost forgets the versions the stream said: until its next snapshot
// nothing is known.
func (c *cache) streamLost() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.latest = nil
}

func copyMap(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
