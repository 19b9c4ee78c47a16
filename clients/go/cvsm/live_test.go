// Tests of live caches (Options.Live, rule R16) and Refresh (rule R17) for
// what the conformance cases do not see: the SSE decoder, the reconnection
// pause, Last-Event-ID and Close.

package cvsm

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// CVSM_LIVE's spellings and the Live option are the conformance cases live_variable_spellings
// and live_variable_turns_the_stream_on_and_off.

func TestSSEDecoder(t *testing.T) {
	var d sseDecoder
	var got []string
	for _, line := range []string{
		": heartbeat", "",
		"event: snapshot", `data: {"secrets":`, `data: {}}`, "id: 7", "",
		"data:no space", "",
		"event: change", "", // no data: no event
		"id: a\x00b", "retry: 10", "",
	} {
		if event, data, ok := d.line(line); ok {
			got = append(got, event+"|"+data)
		}
	}
	want := []string{"snapshot|{\"secrets\":\n{}}", "message|no space"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("events = %q, want %q", got, want)
	}
	if d.lastID != "7" {
		t.Errorf("lastID = %q, want 7 (an id holding NUL is ignored)", d.lastID)
	}
}

func TestReconnectDelayBounds(t *testing.T) {
	for attempt := 0; attempt < 40; attempt++ {
		limit := min(30*time.Second, time.Duration(float64(500*time.Millisecond)*float64(int64(1)<<min(attempt, 20))))
		for range 50 {
			if d := reconnectDelay(attempt); d < limit/2 || d > limit {
				t.Fatalf("reconnectDelay(%d) = %s, want within [%s, %s]", attempt, d, limit/2, limit)
			}
		}
	}
}

func TestRefusedStreamWaitsAndEmptiesTheCache(t *testing.T) {
	clearEnv(t)
	c, err := NewClient(Options{Token: testToken, BaseURL: "http://127.0.0.1:1/api/v1", Team: teamSlug, Live: true, Logger: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		err     error
		least   time.Duration
		emptied bool
	}{
		{&streamRefused{status: 401}, 300 * time.Second, true},
		{&streamRefused{status: 403}, 300 * time.Second, true},
		{&streamRefused{status: 404}, 300 * time.Second, false},
		{&streamRefused{status: 429, retryAfter: 90 * time.Second}, 90 * time.Second, false},
		{&streamRefused{status: 503}, 0, false},
	} {
		c.cache.put(c.cfg.environment, "A", "v", c.cache.mark(), 1)
		d := c.liveLost(tc.err)
		if d < tc.least {
			t.Errorf("%v: pause %s, want at least %s", tc.err, d, tc.least)
		}
		if _, _, cached := c.cache.get(c.cfg.environment, "A"); cached == tc.emptied {
			t.Errorf("%v: cache emptied = %v, want %v", tc.err, !cached, tc.emptied)
		}
	}
}

func waitLive(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// streamRequests are the requests for the change stream the stub saw.
func streamRequests(s *stubServer) []stubRequest {
	var out []stubRequest
	for _, r := range s.reqs() {
		if strings.HasSuffix(r.Path, "/secrets/changes") {
			out = append(out, r)
		}
	}
	return out
}

func readsOf(s *stubServer) (reads int) {
	for _, r := range s.reqs() {
		if strings.Contains(r.Path, "/by-name/") {
			reads++
		}
	}
	return reads
}

func TestLiveChangeDropsTheValueAndCloseEndsTheStream(t *testing.T) {
	s := newStub(t)
	clearEnv(t)
	c, err := NewClient(Options{Token: testToken, BaseURL: s.baseURL(), Team: teamSlug, Live: true, Logger: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if v, err := c.Get(ctx, "API_KEY"); err != nil || v != apiKeyVal {
		t.Fatalf("Get = %q, %v", v, err)
	}
	waitLive(t, "the snapshot", func() bool { _, n := c.liveConnected(); return n == 1 })
	if v, _ := c.Get(ctx, "API_KEY"); v != apiKeyVal {
		t.Fatalf("Get = %q", v)
	}
	if reads := readsOf(s); reads != 1 {
		t.Fatalf("reads = %d, want 1: the snapshot holds the version the read said", reads)
	}

	s.changes(map[string]any{"name": "API_KEY", "value": "two", "id": "42"})
	waitLive(t, "the new value", func() bool { v, _ := c.Get(ctx, "API_KEY"); return v == "two" })
	if reads, streams := readsOf(s), len(streamRequests(s)); reads != 2 || streams != 1 {
		t.Fatalf("reads, streams = %d, %d; want 2, 1", reads, streams)
	}

	// The server closes the stream: the client reconnects with Last-Event-ID.
	s.changes(map[string]any{"close": true})
	waitLive(t, "the reconnection", func() bool { _, n := c.liveConnected(); return n == 2 })
	var ids []string
	for _, r := range streamRequests(s) {
		ids = append(ids, r.Headers["last-event-id"])
	}
	if fmt.Sprint(ids) != fmt.Sprint([]string{"", "42"}) {
		t.Fatalf("Last-Event-ID per stream = %q, want [\"\" \"42\"]", ids)
	}

	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	waitLive(t, "Close to end the stream", func() bool { open, closed := s.streams(); return open == 0 && closed == 2 })
	select {
	case <-c.live.done:
	default:
		t.Fatal("Close returned before the stream's goroutine")
	}
	_ = c.Close() // twice is fine
}

func TestCloseBeforeAnyReadStartsNoStream(t *testing.T) {
	s := newStub(t)
	clearEnv(t)
	c, err := NewClient(Options{Token: testToken, BaseURL: s.baseURL(), Team: teamSlug, Live: true})
	if err != nil {
		t.Fatal(err)
	}
	_ = c.Close()
	if _, err := c.Get(context.Background(), "API_KEY"); err != nil {
		t.Fatal(err)
	}
	if streams := streamRequests(s); len(streams) != 0 {
		t.Fatalf("streams = %d after Close, want 0", len(streams))
	}
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }
