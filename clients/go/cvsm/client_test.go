package cvsm

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
)

var ctx = context.Background()

func TestEveryRequestSendsBearerTokenAcceptAndUserAgent(t *testing.T) {
	s := newStub(t)
	c := newTestClient(t, s, Options{})
	if _, err := c.Get(ctx, "DATABASE_URL"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetAll(ctx); err != nil {
		t.Fatal(err)
	}
	reqs := s.reqs()
	if len(reqs) != 2 {
		t.Fatalf("want 2 requests (by-name read, export), got %d: %v", len(reqs), s.paths())
	}
	for _, r := range reqs {
		if r.method != "GET" {
			t.Errorf("%s: method %s, want GET", r.path, r.method)
		}
		if got := r.header.Get("Authorization"); got != "Bearer "+testToken {
			t.Errorf("%s: Authorization %q", r.path, got)
		}
		if got := r.header.Get("Accept"); got != "application/json" {
			t.Errorf("%s: Accept %q", r.path, got)
		}
		if got := r.header.Get("User-Agent"); got != "cvsm-go/"+Version {
			t.Errorf("%s: User-Agent %q", r.path, got)
		}
	}
}

func TestGetIsOneByNameRequestWithTheTeamAsGiven(t *testing.T) {
	for _, team := range []string{teamSlug, teamID} {
		s := newStub(t)
		c := newTestClient(t, s, Options{Team: team})
		v, err := c.Get(ctx, "DATABASE_URL")
		if err != nil || v != dbURLValue {
			t.Fatalf("Get = %q, %v", v, err)
		}
		if _, err := c.Get(ctx, "API_KEY"); err != nil {
			t.Fatal(err)
		}
		want := []string{
			"/api/v1/teams/" + team + "/secrets/by-name/DATABASE_URL?environment=production",
			"/api/v1/teams/" + team + "/secrets/by-name/API_KEY?environment=production",
		}
		if !reflect.DeepEqual(s.paths(), want) {
			t.Errorf("team %s: requests %v, want %v (no /teams lookup, no listing)", team, s.paths(), want)
		}
	}
}

func TestTheTeamIsPercentEncodedInThePath(t *testing.T) {
	s := newStub(t)
	c := newTestClient(t, s, Options{Team: "a team/with?odd#chars%"})
	c.Get(ctx, "API_KEY")
	c.GetAll(ctx)
	reqs := s.reqs()
	if len(reqs) < 2 {
		t.Fatalf("requests %v", s.paths())
	}
	const escaped = "/api/v1/teams/a%20team%2Fwith%3Fodd%23chars%25/secrets"
	if got := reqs[0].rawPath; got != escaped+"/by-name/API_KEY" {
		t.Errorf("by-name path %s", got)
	}
	if got := reqs[len(reqs)-1].rawPath; got != escaped+"/export" {
		t.Errorf("export path %s", got)
	}
}

func TestUnknownTeamIsAConfigurationErrorFromTheListing(t *testing.T) {
	for _, team := range []string{"nope", otherTeam} {
		s := newStub(t)
		c := newTestClient(t, s, Options{Team: team})
		for i := 0; i < 2; i++ {
			_, err := c.Get(ctx, "API_KEY")
			ce := asError(t, err)
			if !errors.Is(err, ErrConfiguration) || ce.Status != 404 || ce.RequestID != s.lastRequestID() {
				t.Fatalf("want a configuration error with the listing's 404, got %#v", ce)
			}
			if !strings.Contains(err.Error(), `team "`+team+`"`) {
				t.Errorf("message should name the team: %v", err)
			}
		}
		byName := "/api/v1/teams/" + team + "/secrets/by-name/API_KEY?environment=production"
		listing := "/api/v1/teams/" + team + "/secrets?environment=production&search=API_KEY"
		if want := []string{byName, listing, byName, listing}; !reflect.DeepEqual(s.paths(), want) {
			t.Fatalf("requests %v, want %v (the by-name read, then the listing; nothing remembered)", s.paths(), want)
		}
		if _, err := c.GetAll(ctx); !errors.Is(err, ErrConfiguration) || asError(t, err).Status != 404 {
			t.Errorf("GetAll: %v", err)
		}
	}
}

func TestGetNameIsCaseSensitiveAndSuggestsTheOtherCase(t *testing.T) {
	s := newStub(t)
	c := newTestClient(t, s, Options{})
	_, err := c.Get(ctx, "database_url")
	if !errors.Is(err, ErrNotFound) {
		t.Fatalf("want not found, got %v", err)
	}
	var ce *Error
	if !errors.As(err, &ce) || ce.Status != 404 || ce.Kind != KindNotFound || ce.Suggestion != "DATABASE_URL" {
		t.Fatalf("want *Error{Kind: not_found, Status: 404, Suggestion: DATABASE_URL}, got %#v", err)
	}
	want := `cvsm: secret "database_url" not found in production; did you mean "DATABASE_URL"?`
	if err.Error() != want {
		t.Errorf("message %q, want %q", err.Error(), want)
	}
	if ce.RequestID != s.requestID(1) {
		t.Errorf("RequestID %q, want the by-name read's %q", ce.RequestID, s.requestID(1))
	}
	want2 := []string{
		"/api/v1/teams/acme/secrets/by-name/database_url?environment=production",
		"/api/v1/teams/acme/secrets?environment=production&search=database_url",
	}
	if !reflect.DeepEqual(s.paths(), want2) { // the listing only after the by-name 404
		t.Errorf("requests %v, want %v", s.paths(), want2)
	}
}

func TestGetAbsentNameIsNotFoundWithoutSuggestion(t *testing.T) {
	s := newStub(t)
	c := newTestClient(t, s, Options{})
	_, err := c.Get(ctx, "MISSING")
	if !errors.Is(err, ErrNotFound) {
		t.Fatalf("want not found, got %v", err)
	}
	if strings.Contains(err.Error(), "did you mean") {
		t.Errorf("no suggestion expected: %v", err)
	}
}

func TestGetOnlyMatchesTheClientsEnvironment(t *testing.T) {
	s := newStub(t)
	c := newTestClient(t, s, Options{Environment: "staging"})
	v, err := c.Get(ctx, "API_KEY")
	if err != nil || v != "staging-key" {
		t.Fatalf("Get = %q, %v", v, err)
	}
	if _, err := c.Get(ctx, "DATABASE_URL"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("DATABASE_URL exists only in production, got %v", err)
	}
}

func TestGetAllUsesExportAsJSONAndFillsTheCacheForGet(t *testing.T) {
	s := newStub(t)
	c := newTestClient(t, s, Options{Team: teamID})
	all, err := c.GetAll(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"DATABASE_URL": dbURLValue, "API_KEY": apiKeyVal}
	if !reflect.DeepEqual(all, want) {
		t.Fatalf("GetAll = %v", all)
	}
	reqs := s.reqs()
	if len(reqs) != 1 || reqs[0].path != "/api/v1/teams/"+teamID+"/secrets/export" {
		t.Fatalf("requests %v", s.paths())
	}
	q, _ := url.ParseQuery(reqs[0].query)
	if q.Get("format") != "json" || q.Get("environment") != "production" {
		t.Errorf("export query %q", reqs[0].query)
	}
	for name, value := range want {
		v, err := c.Get(ctx, name)
		if err != nil || v != value {
			t.Errorf("Get(%s) = %q, %v", name, v, err)
		}
	}
	if _, err := c.GetAll(ctx); err != nil {
		t.Fatal(err)
	}
	if n := s.count(); n != 1 {
		t.Errorf("Get and GetAll after GetAll must be cached, got requests %v", s.paths())
	}
	all["API_KEY"] = "changed by caller"
	again, _ := c.GetAll(ctx)
	if again["API_KEY"] != apiKeyVal {
		t.Error("the caller's map must not alias the cache")
	}
}

func TestCachedValueIsServedUntilTheTTLExpires(t *testing.T) {
	s := newStub(t)
	c := newTestClient(t, s, Options{Team: teamID, CacheTTL: 5 * time.Second})
	if _, err := c.Get(ctx, "API_KEY"); err != nil {
		t.Fatal(err)
	}
	c.clock.Advance(4999 * time.Millisecond)
	if _, err := c.Get(ctx, "API_KEY"); err != nil {
		t.Fatal(err)
	}
	if n := s.count(); n != 1 {
		t.Fatalf("within the TTL: want 1 request, got %v", s.paths())
	}
	c.clock.Advance(time.Millisecond)
	if _, err := c.Get(ctx, "API_KEY"); err != nil {
		t.Fatal(err)
	}
	if n := s.count(); n != 2 {
		t.Fatalf("after the TTL: want 2 requests, got %v", s.paths())
	}
}

func TestGetAllResultExpiresWithTheTTL(t *testing.T) {
	s := newStub(t)
	c := newTestClient(t, s, Options{Team: teamID})
	c.GetAll(ctx)
	c.clock.Advance(29 * time.Second)
	c.GetAll(ctx)
	if n := s.count(); n != 1 {
		t.Fatalf("default TTL is 30s: want 1 request, got %d", n)
	}
	c.clock.Advance(time.Second)
	c.GetAll(ctx)
	c.Get(ctx, "API_KEY")
	if n := s.count(); n != 2 {
		t.Fatalf("after 30s GetAll asks again and refills Get's cache: want 2 requests, got %v", s.paths())
	}
}

func TestClearCacheMakesTheNextCallAskTheServer(t *testing.T) {
	s := newStub(t)
	c := newTestClient(t, s, Options{Team: teamID})
	c.GetAll(ctx)
	c.ClearCache()
	c.GetAll(ctx)
	if _, err := c.Get(ctx, "API_KEY"); err != nil {
		t.Fatal(err)
	}
	c.ClearCache()
	if _, err := c.Get(ctx, "API_KEY"); err != nil {
		t.Fatal(err)
	}
	if n := s.count(); n != 3 { // export, export, (cached), by-name
		t.Fatalf("want 3 requests, got %v", s.paths())
	}
}

func TestNoCacheDisablesCachingEvenWhenTheEnvironmentSetsATTL(t *testing.T) {
	s := newStub(t)
	c := newTestClient(t, s, Options{Team: teamID, CacheTTL: NoCache})
	t.Setenv(EnvCacheTTL, "60") // set after construction: explicit NoCache wins anyway
	if c.CacheTTL() != 0 {
		t.Fatalf("CacheTTL() = %s, want 0", c.CacheTTL())
	}
	c.Get(ctx, "API_KEY")
	c.Get(ctx, "API_KEY")
	c.GetAll(ctx)
	c.Get(ctx, "API_KEY")
	if n := s.count(); n != 4 {
		t.Fatalf("without a cache every call asks: want 4 requests, got %v", s.paths())
	}
}

func TestErrorsAreNeverCached(t *testing.T) {
	s := newStub(t)
	c := newTestClient(t, s, Options{Team: teamID, MaxRetries: Int(0)})
	s.inject(fault{pathPrefix: "/teams/", remaining: 1, status: 500, body: `{"error":"rusak"}`})
	if _, err := c.Get(ctx, "API_KEY"); !errors.Is(err, ErrAPI) {
		t.Fatalf("want API error, got %v", err)
	}
	v, err := c.Get(ctx, "API_KEY")
	if err != nil || v != apiKeyVal {
		t.Fatalf("after an error the next call asks again: %q, %v", v, err)
	}
	if _, err := c.Get(ctx, "NOPE"); !errors.Is(err, ErrNotFound) {
		t.Fatal(err)
	}
	c.Get(ctx, "NOPE")
	if n := s.count(); n != 6 { // failed by-name, by-name, by-name+list, by-name+list
		t.Fatalf("want 6 requests, got %v", s.paths())
	}
}

func TestAuthenticationAndPermissionErrorsEmptyTheCache(t *testing.T) {
	for _, tc := range []struct {
		status   int
		sentinel error
	}{{401, ErrAuthentication}, {403, ErrPermissionDenied}} {
		s := newStub(t)
		c := newTestClient(t, s, Options{Team: teamID})
		c.GetAll(ctx) // caches API_KEY, DATABASE_URL and the whole result
		s.inject(fault{pathPrefix: "/teams/" + teamID + "/secrets/by-name/NOPE", remaining: 1, status: tc.status, body: `{"error":"tidak boleh"}`})
		if _, err := c.Get(ctx, "NOPE"); !errors.Is(err, tc.sentinel) {
			t.Fatalf("%d: want %v, got %v", tc.status, tc.sentinel, err)
		}
		before := s.count()
		if _, err := c.Get(ctx, "API_KEY"); err != nil {
			t.Fatal(err)
		}
		if _, err := c.GetAll(ctx); err != nil {
			t.Fatal(err)
		}
		if got := s.count() - before; got != 2 {
			t.Fatalf("%d: the cache must be empty after it: want 2 requests, got %v", tc.status, s.paths())
		}
	}
}

// The by-name read maps statuses plainly, except a 400 (a configuration
// problem) and a 404 (which the listing decides, see rules_test.go).
func TestHTTPStatusesMapToErrorKinds(t *testing.T) {
	cases := []struct {
		status   int
		sentinel error
		kind     Kind
	}{
		{401, ErrAuthentication, KindAuthentication},
		{403, ErrPermissionDenied, KindPermissionDenied},
		{429, ErrRateLimited, KindRateLimited},
		{400, ErrConfiguration, KindConfiguration},
		{409, ErrAPI, KindAPI},
		{410, ErrAPI, KindAPI},
		{500, ErrAPI, KindAPI},
		{503, ErrAPI, KindAPI},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprint(tc.status), func(t *testing.T) {
			s := newStub(t)
			c := newTestClient(t, s, Options{Team: teamID})
			s.inject(fault{pathPrefix: "/teams/" + teamID + "/secrets/by-name/", remaining: 10, status: tc.status,
				header: map[string]string{"Retry-After": "7"}, body: `{"error":"pesan server"}`})
			_, err := c.Get(ctx, "API_KEY")
			if !errors.Is(err, tc.sentinel) {
				t.Fatalf("want %v, got %v", tc.sentinel, err)
			}
			for _, other := range []error{ErrAuthentication, ErrPermissionDenied, ErrNotFound, ErrRateLimited, ErrAPI, ErrNetwork, ErrConfiguration} {
				if other != tc.sentinel && errors.Is(err, other) {
					t.Errorf("error also matches %v", other)
				}
			}
			var ce *Error
			if !errors.As(err, &ce) {
				t.Fatalf("errors.As(*Error) failed for %T", err)
			}
			if ce.Kind != tc.kind || ce.Status != tc.status {
				t.Errorf("Kind %s Status %d, want %s %d", ce.Kind, ce.Status, tc.kind, tc.status)
			}
			if !strings.HasPrefix(ce.Message, fmt.Sprint(tc.status)) || !strings.Contains(ce.Message, ": pesan server") {
				t.Errorf("message %q should be the status then the server's message", ce.Message)
			}
			if ce.RequestID == "" || ce.RequestID != s.lastRequestID() {
				t.Errorf("RequestID %q, want the answer's X-Request-Id %q", ce.RequestID, s.lastRequestID())
			}
			wantRetryAfter := time.Duration(0)
			if tc.status == 429 {
				wantRetryAfter = 7 * time.Second
			}
			if ce.RetryAfter != wantRetryAfter || ce.HasRetryAfter != (tc.status == 429) {
				t.Errorf("RetryAfter %s (set %v), want %s", ce.RetryAfter, ce.HasRetryAfter, wantRetryAfter)
			}
		})
	}
}

const httpTimeFormat = "Mon, 02 Jan 2006 15:04:05 GMT"

func TestRetriesOn502503504ThenSucceeds(t *testing.T) {
	for _, status := range []int{502, 503, 504} {
		t.Run(fmt.Sprint(status), func(t *testing.T) {
			s := newStub(t)
			c := newTestClient(t, s, Options{Team: teamID})
			s.inject(fault{pathPrefix: "/teams/", remaining: 2, status: status})
			all, err := c.GetAll(ctx)
			if err != nil || all["API_KEY"] != apiKeyVal {
				t.Fatalf("GetAll = %v, %v", all, err)
			}
			if n := s.count(); n != 3 {
				t.Errorf("want 3 attempts, got %d", n)
			}
			if got := len(c.sleeps.recorded()); got != 2 {
				t.Errorf("want a backoff sleep before each of 2 retries, got %d", got)
			}
		})
	}
}

func TestRetriesExhaustedGiveAPIErrorWithStatus(t *testing.T) {
	s := newStub(t)
	c := newTestClient(t, s, Options{Team: teamID, MaxRetries: Int(3)})
	s.inject(fault{pathPrefix: "/teams/", remaining: 100, status: 503, body: `{"error":"sibuk"}`})
	_, err := c.GetAll(ctx)
	var ce *Error
	if !errors.As(err, &ce) || ce.Kind != KindAPI || ce.Status != 503 {
		t.Fatalf("want API error with status 503, got %v", err)
	}
	if n := s.count(); n != 4 {
		t.Errorf("MaxRetries 3: want 4 attempts, got %d", n)
	}
}

func TestMaxRetriesZeroMakesOneAttempt(t *testing.T) {
	s := newStub(t)
	c := newTestClient(t, s, Options{Team: teamID, MaxRetries: Int(0)})
	s.inject(fault{pathPrefix: "/teams/", remaining: 100, status: 502})
	if _, err := c.GetAll(ctx); !errors.Is(err, ErrAPI) {
		t.Fatal(err)
	}
	if n := s.count(); n != 1 {
		t.Errorf("want 1 attempt, got %d", n)
	}
}

func TestNeverRetriesAfter4xx(t *testing.T) {
	for _, status := range []int{400, 401, 403, 404, 409, 429} {
		t.Run(fmt.Sprint(status), func(t *testing.T) {
			s := newStub(t)
			c := newTestClient(t, s, Options{Team: teamID})
			s.inject(fault{pathPrefix: "/teams/", remaining: 100, status: status})
			if _, err := c.GetAll(ctx); err == nil {
				t.Fatal("want an error")
			}
			if n := s.count(); n != 1 {
				t.Errorf("want 1 attempt, got %d", n)
			}
			if len(c.sleeps.recorded()) != 0 {
				t.Error("no backoff expected")
			}
		})
	}
}

func TestInternalServerErrorIsNotRetried(t *testing.T) {
	s := newStub(t)
	c := newTestClient(t, s, Options{Team: teamID})
	s.inject(fault{pathPrefix: "/teams/", remaining: 100, status: 500})
	var ce *Error
	if _, err := c.GetAll(ctx); !errors.As(err, &ce) || ce.Status != 500 {
		t.Fatalf("want API error 500, got %v", err)
	}
	if n := s.count(); n != 1 {
		t.Errorf("want 1 attempt, got %d", n)
	}
}

func TestDroppedConnectionsAreRetriedThenNetworkError(t *testing.T) {
	s := newStub(t)
	c := newTestClient(t, s, Options{Team: teamID})
	s.inject(fault{pathPrefix: "/teams/", remaining: 2, drop: true})
	if _, err := c.GetAll(ctx); err != nil {
		t.Fatalf("two drops then success: %v", err)
	}
	if n := s.count(); n != 3 {
		t.Fatalf("want 3 attempts, got %d", n)
	}

	s2 := newStub(t)
	c2 := newTestClient(t, s2, Options{Team: teamID})
	s2.inject(fault{pathPrefix: "/teams/", remaining: 100, drop: true})
	_, err := c2.GetAll(ctx)
	var ce *Error
	if !errors.As(err, &ce) || ce.Kind != KindNetwork || ce.Status != 0 || ce.Err == nil {
		t.Fatalf("want network error with a cause and no status, got %#v", err)
	}
	if n := s2.count(); n != 3 {
		t.Errorf("want 3 attempts, got %d", n)
	}
}

func TestConnectionRefusedIsNetworkError(t *testing.T) {
	s := newStub(t)
	base := s.baseURL()
	s.srv.Close()
	c := newTestClient(t, s, Options{Team: teamID, BaseURL: base, MaxRetries: Int(1)})
	if _, err := c.Get(ctx, "API_KEY"); !errors.Is(err, ErrNetwork) {
		t.Fatalf("want network error, got %v", err)
	}
	if got := len(c.sleeps.recorded()); got != 1 {
		t.Errorf("want 1 retry, got %d", got)
	}
}

func TestTimeoutAppliesPerAttemptAndIsANetworkError(t *testing.T) {
	s := newStub(t)
	c := newTestClient(t, s, Options{Team: teamID, Timeout: 50 * time.Millisecond, MaxRetries: Int(1)})
	s.inject(fault{pathPrefix: "/teams/", remaining: 100, delay: 2 * time.Second, status: 200, body: "{}"})
	start := time.Now()
	_, err := c.GetAll(ctx)
	if !errors.Is(err, ErrNetwork) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("want a network error wrapping context.DeadlineExceeded, got %v", err)
	}
	if !strings.Contains(err.Error(), "timed out after 50ms") {
		t.Errorf("message %q", err.Error())
	}
	if elapsed := time.Since(start); elapsed > time.Second {
		t.Errorf("two 50ms attempts took %s", elapsed)
	}
	if n := s.count(); n != 2 {
		t.Errorf("want 2 attempts, got %d", n)
	}
}

func TestCanceledContextStopsRetrying(t *testing.T) {
	s := newStub(t)
	c := newTestClient(t, s, Options{Team: teamID})
	s.inject(fault{pathPrefix: "/teams/", remaining: 100, status: 503})
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
	s.inject(fault{pathPrefix: "/teams/", remaining: 100, status: 504})
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

func TestUnreadableResponseIsRetriedThenNetworkErrorWithoutTheBody(t *testing.T) {
	s := newStub(t)
	c := newTestClient(t, s, Options{Team: teamID})
	body := `{"API_KEY": "` + apiKeyVal + `", broken`
	s.inject(fault{pathPrefix: "/teams/", remaining: 100, status: 200, body: body})
	_, err := c.GetAll(ctx)
	if !errors.Is(err, ErrNetwork) {
		t.Fatalf("want network error, got %v", err)
	}
	var ce *Error
	if errors.As(err, &ce); ce.Status != 0 || ce.RequestID != s.lastRequestID() {
		t.Errorf("Status %d RequestID %q: an unreadable answer has no status but keeps its request id", ce.Status, ce.RequestID)
	}
	if strings.Contains(err.Error(), apiKeyVal) || strings.Contains(err.Error(), "broken") {
		t.Errorf("message quotes the body: %v", err)
	}
	if n := s.count(); n != 3 {
		t.Errorf("want 3 attempts, got %d", n)
	}
}

func TestErrorMessagesNeverContainTheToken(t *testing.T) {
	s := newStub(t)
	c := newTestClient(t, s, Options{Team: teamID})
	s.inject(fault{pathPrefix: "/teams/", remaining: 1, status: 401, body: `{"error":"token ` + testToken + ` ditolak"}`})
	_, err := c.GetAll(ctx)
	if !errors.Is(err, ErrAuthentication) {
		t.Fatal(err)
	}
	if strings.Contains(err.Error(), testToken) {
		t.Fatalf("token in message: %v", err)
	}
	if !strings.Contains(err.Error(), "<redacted>") {
		t.Errorf("the echoed token should be replaced: %v", err)
	}
}

func TestInjectSetsMissingVariablesAndKeepsExistingOnes(t *testing.T) {
	s := newStub(t)
	c := newTestClient(t, s, Options{Team: teamID})
	t.Setenv("API_KEY", "already here")
	t.Setenv("DATABASE_URL", "")
	os.Unsetenv("DATABASE_URL")
	names, err := c.Inject(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(names, []string{"DATABASE_URL"}) {
		t.Errorf("names %v, want [DATABASE_URL]", names)
	}
	if got := os.Getenv("API_KEY"); got != "already here" {
		t.Errorf("API_KEY overwritten: %q", got)
	}
	if got := os.Getenv("DATABASE_URL"); got != dbURLValue {
		t.Errorf("DATABASE_URL = %q", got)
	}
}

func TestInjectKeepsAVariableSetToTheEmptyString(t *testing.T) {
	s := newStub(t)
	c := newTestClient(t, s, Options{Team: teamID})
	t.Setenv("API_KEY", "")
	t.Setenv("DATABASE_URL", "")
	os.Unsetenv("DATABASE_URL")
	names, err := c.Inject(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := os.LookupEnv("API_KEY"); !ok || v != "" || !reflect.DeepEqual(names, []string{"DATABASE_URL"}) {
		t.Errorf("API_KEY=%q set=%v names=%v: an empty variable is still set and kept", v, ok, names)
	}
}

func TestInjectWithOverwriteReplacesAndReturnsSortedNames(t *testing.T) {
	s := newStub(t)
	c := newTestClient(t, s, Options{Team: teamID})
	t.Setenv("API_KEY", "old")
	t.Setenv("DATABASE_URL", "") // set but empty still counts as set
	names, err := c.Inject(ctx, Overwrite(true))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(names, []string{"API_KEY", "DATABASE_URL"}) {
		t.Errorf("names %v", names)
	}
	if os.Getenv("API_KEY") != apiKeyVal || os.Getenv("DATABASE_URL") != dbURLValue {
		t.Error("values not overwritten")
	}
	t.Setenv("API_KEY", "old")
	names, _ = c.Inject(ctx)
	if len(names) != 0 || os.Getenv("API_KEY") != "old" {
		t.Errorf("without Overwrite nothing set is replaced: %v", names)
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
