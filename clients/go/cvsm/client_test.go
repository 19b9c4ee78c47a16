package cvsm

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

var ctx = context.Background()

// The team percent-encoded in the path, NoCache (cache_ttl 0 in the driver) and the
// variables inject keeps are the conformance cases team_is_percent_encoded_in_the_path,
// cache_ttl_zero_disables_cache and inject_sets_the_environment.

func TestCanceledContextStopsRetrying(t *testing.T) {
	s := newStub(t)
	c := newTestClient(t, s, Options{Team: teamID})
	s.inject(stubFault{Path: "/api/v1/teams/", Count: 100, Status: 503})
	cctx, cancel := context.WithCancel(ctx)
	c.sleep = func(ctx context.Context, d time.Duration) error { cancel(); return sleepContext(ctx, d) }
	_, err := c.GetAll(cctx)
	if !errors.Is(err, ErrNetwork) || !errors.Is(err, context.Canceled) {
		t.Fatalf("want a network error wrapping context.Canceled, got %v", err)
	}
	if n := s.count(); n != 1 {
		t.Errorf("want 1 attempt, got %d", n)
	}
}

func TestBackoffIsFullJitterBelowTheDoublingCap(t *testing.T) {
	for retry := 0; retry < 4; retry++ {
		limit := time.Duration(float64(100*time.Millisecond) * float64(int(1)<<retry))
		seen := map[time.Duration]bool{}
		for i := 0; i < 200; i++ {
			d := backoff(retry)
			if d < 0 || d > limit {
				t.Fatalf("retry %d: sleep %s outside [0, %s]", retry, d, limit)
			}
			seen[d] = true
		}
		if len(seen) < 50 {
			t.Errorf("retry %d: only %d distinct sleeps in 200, not random", retry, len(seen))
		}
	}
	// The client asks for one sleep per retry with the growing cap.
	s := newStub(t)
	c := newTestClient(t, s, Options{Team: teamID, MaxRetries: Int(3)})
	s.inject(stubFault{Path: "/api/v1/teams/", Count: 100, Status: 504})
	c.GetAll(ctx)
	sleeps := c.sleeps.recorded()
	if len(sleeps) != 3 {
		t.Fatalf("want 3 sleeps, got %v", sleeps)
	}
	for i, d := range sleeps {
		if d > time.Duration(100<<i)*time.Millisecond {
			t.Errorf("sleep %d = %s above its cap", i, d)
		}
	}
}

func TestConcurrentUseIsSafe(t *testing.T) {
	s := newStub(t)
	c := newTestClient(t, s, Options{})
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			for j := 0; j < 5; j++ {
				var err error
				switch (i + j) % 3 {
				case 0:
					var v string
					v, err = c.Get(ctx, "API_KEY")
					if err == nil && v != apiKeyVal {
						err = fmt.Errorf("wrong value %q", v)
					}
				case 1:
					_, err = c.GetAll(ctx)
				default:
					c.ClearCache()
				}
				if err != nil {
					errs <- err
				}
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for _, p := range s.paths() {
		if !strings.HasPrefix(p, "/api/v1/teams/acme/secrets/") {
			t.Errorf("unexpected request %s", p)
		}
	}
}
