// Tests of live caches (Options.Live, rule R16) and Refresh (rule R17) for
// what the conformance cases do not see: the SSE decoder, the reconnection
// pause, Last-Event-ID and Close.

package cvsm

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
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

// liveServer answers by-name reads with a value and version it holds, and
// the change stream with the events the test sends.
type liveServer struct {
	srv *httptest.Server

	mu      sync.Mutex
	value   string
	version int
	reads   int
	streams int
	lastIDs []string
	events  chan string
	closed  chan struct{} // a stream's request ended
}

func newLiveServer(t *testing.T) *liveServer {
	s := &liveServer{value: "one", version: 1, events: make(chan string, 16), closed: make(chan struct{}, 16)}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/secrets/changes") {
			s.mu.Lock()
			s.streams++
			s.lastIDs = append(s.lastIDs, r.Header.Get("Last-Event-ID"))
			version := s.version
			s.mu.Unlock()
			defer func() { s.closed <- struct{}{} }()
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprintf(w, "event: snapshot\ndata: {\"secrets\": {\"A\": {\"environment\": \"production\", \"version\": %d}}}\n\n", version)
			w.(http.Flusher).Flush()
			for {
				select {
				case <-r.Context().Done():
					return
				case ev := <-s.events:
					if ev == "" { // the server closes the stream
						return
					}
					fmt.Fprint(w, ev)
					w.(http.Flusher).Flush()
				}
			}
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		s.reads++
		writeJSON(w, 200, map[string]any{"secret": map[string]any{"name": "A", "version": s.version}, "value": s.value})
	}))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *liveServer) set(value string, version int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.value, s.version = value, version
}

func (s *liveServer) counts() (reads, streams int, ids []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reads, s.streams, append([]string(nil), s.lastIDs...)
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

func TestLiveChangeDropsTheValueAndCloseEndsTheStream(t *testing.T) {
	s := newLiveServer(t)
	clearEnv(t)
	c, err := NewClient(Options{Token: testToken, BaseURL: s.srv.URL + "/api/v1", Team: teamSlug, Live: true, Logger: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if v, err := c.Get(ctx, "A"); err != nil || v != "one" {
		t.Fatalf("Get = %q, %v", v, err)
	}
	waitLive(t, "the snapshot", func() bool { _, n := c.liveConnected(); return n == 1 })
	if v, _ := c.Get(ctx, "A"); v != "one" {
		t.Fatalf("Get = %q", v)
	}
	if reads, _, _ := s.counts(); reads != 1 {
		t.Fatalf("reads = %d, want 1: the snapshot holds the version the read said", reads)
	}

	s.set("two", 2)
	s.events <- "id: 42\nevent: change\ndata: {\"name\": \"A\", \"environment\": \"production\", \"version\": 2}\n\n"
	waitLive(t, "the new value", func() bool { v, _ := c.Get(ctx, "A"); return v == "two" })
	if reads, streams, _ := s.counts(); reads != 2 || streams != 1 {
		t.Fatalf("reads, streams = %d, %d; want 2, 1", reads, streams)
	}

	// The server closes the stream: the client reconnects with Last-Event-ID.
	s.events <- ""
	<-s.closed
	waitLive(t, "the reconnection", func() bool { _, n := c.liveConnected(); return n == 2 })
	if _, _, ids := s.counts(); fmt.Sprint(ids) != fmt.Sprint([]string{"", "42"}) {
		t.Fatalf("Last-Event-ID per stream = %q, want [\"\" \"42\"]", ids)
	}

	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not end the stream")
	}
	select {
	case <-c.live.done:
	default:
		t.Fatal("Close returned before the stream's goroutine")
	}
	_ = c.Close() // twice is fine
}

func TestCloseBeforeAnyReadStartsNoStream(t *testing.T) {
	s := newLiveServer(t)
	clearEnv(t)
	c, err := NewClient(Options{Token: testToken, BaseURL: s.srv.URL + "/api/v1", Team: teamSlug, Live: true})
	if err != nil {
		t.Fatal(err)
	}
	_ = c.Close()
	if _, err := c.Get(context.Background(), "A"); err != nil {
		t.Fatal(err)
	}
	if _, streams, _ := s.counts(); streams != 0 {
		t.Fatalf("streams = %d after Close, want 0", streams)
	}
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }
