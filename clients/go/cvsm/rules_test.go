// Tests for the decided behaviour of conformance/PROTOCOL.md (rules R1-R13;
// R14 is in stale_test.go),
// one group per rule, against the stub server.

package cvsm

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func asError(t *testing.T, err error) *Error {
	t.Helper()
	var ce *Error
	if !errors.As(err, &ce) {
		t.Fatalf("want a *cvsm.Error, got %T %v", err, err)
	}
	return ce
}

// R1: the timeout covers the whole attempt, body included.
func TestR1TimeoutCoversADrippingBody(t *testing.T) {
	clearEnv(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(200)
		w.(http.Flusher).Flush()
		for i := 0; i < 100; i++ { // 10 s of one byte every 100 ms
			select {
			case <-r.Context().Done():
				return
			case <-time.After(100 * time.Millisecond):
			}
			_, _ = w.Write([]byte(" "))
			w.(http.Flusher).Flush()
		}
		_, _ = w.Write([]byte("{}"))
	}))
	defer srv.Close()
	c, err := NewClient(Options{Token: testToken, BaseURL: srv.URL + "/api/v1", Team: teamID,
		Timeout: 400 * time.Millisecond, MaxRetries: Int(1)})
	if err != nil {
		t.Fatal(err)
	}
	c.sleep = (&sleepRecorder{}).sleep
	start := time.Now()
	_, err = c.GetAll(ctx)
	elapsed := time.Since(start)
	if ce := asError(t, err); ce.Kind != KindNetwork || ce.Status != 0 || !errors.Is(err, ErrNetwork) {
		t.Fatalf("want a network error without status, got %#v", ce)
	}
	if !strings.Contains(err.Error(), "timed out") {
		t.Errorf("message %q should say it timed out", err.Error())
	}
	if elapsed < 800*time.Millisecond || elapsed > 3*time.Second {
		t.Errorf("two attempts of 400 ms took %s", elapsed)
	}
}

// R1: an error answer whose body drips past the timeout was never given: a
// network error, retried like any other, never an error with the status (a
// by-name 404 would otherwise go on to the listing, a 500 be final).
func TestR1AnErrorAnswerWhoseBodyDripsIsARetriedNetworkError(t *testing.T) {
	for _, status := range []int{500, 429, 404, 503} {
		t.Run(fmt.Sprint(status), func(t *testing.T) {
			s := newStub(t)
			c := newTestClient(t, s, Options{Team: teamID, Timeout: 300 * time.Millisecond, MaxRetries: Int(1)})
			byName := "/teams/" + teamID + "/secrets/by-name/API_KEY"
			s.inject(fault{pathPrefix: byName, exact: true, remaining: 100, status: status,
				body: `{"error":"pesan server yang menetes"}`, drip: 100 * time.Millisecond})
			start := time.Now()
			_, err := c.Get(ctx, "API_KEY")
			elapsed := time.Since(start)
			ce := asError(t, err)
			if ce.Kind != KindNetwork || ce.Status != 0 || !errors.Is(err, ErrNetwork) || !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("want a timed-out network error without status, got %#v", ce)
			}
			if !strings.Contains(ce.Message, "timed out") {
				t.Errorf("message %q should say it timed out", ce.Message)
			}
			if ce.RequestID != s.lastRequestID() {
				t.Errorf("RequestID %q, want the last answer's %q", ce.RequestID, s.lastRequestID())
			}
			if got := s.paths(); len(got) != 2 || strings.Contains(got[0]+got[1], "search=") {
				t.Errorf("want the by-name read twice and no listing, got %v", got)
			}
			if elapsed > 2*time.Second {
				t.Errorf("two attempts of 300 ms took %s", elapsed)
			}
		})
	}
}

// R1: an error answer cut off in its body is a network error too, retried.
func TestAnErrorAnswerCutOffInItsBodyIsARetriedNetworkError(t *testing.T) {
	clearEnv(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var served atomic.Int32
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			served.Add(1)
			go func() {
				defer conn.Close()
				_, _ = bufio.NewReader(conn).ReadString('\n')
				_, _ = conn.Write([]byte("HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\n" +
					"Content-Length: 100\r\nX-Request-Id: cut\r\n\r\n{\"error\":\"rah"))
			}()
		}
	}()
	c, err := NewClient(Options{Token: testToken, BaseURL: "http://" + ln.Addr().String() + "/api/v1", Team: teamID,
		MaxRetries: Int(2)})
	if err != nil {
		t.Fatal(err)
	}
	c.sleep = (&sleepRecorder{}).sleep
	_, err = c.Get(ctx, "API_KEY")
	ce := asError(t, err)
	if ce.Kind != KindNetwork || ce.Status != 0 || ce.RequestID != "cut" {
		t.Fatalf("want a network error without status, got %#v", ce)
	}
	if n := served.Load(); n != 3 {
		t.Errorf("want 3 attempts of the by-name read and no listing, got %d", n)
	}
}

// R2: a large export is read in one request.
func TestR2LargeExportIsReadOnce(t *testing.T) {
	s := newStub(t)
	// Decoding 11 MiB under -race on a loaded machine can pass the default 10 s attempt
	// limit, which would retry the read and fail the test for the wrong reason.
	c := newTestClient(t, s, Options{Team: teamID, Timeout: 2 * time.Minute})
	var b strings.Builder
	b.WriteString("{")
	big := strings.Repeat("x", 1<<20)
	for i := 0; i < 11; i++ {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString(`"BIG_` + string(rune('A'+i)) + `":"` + big + `"`)
	}
	b.WriteString("}")
	s.inject(fault{pathPrefix: "/teams/", remaining: 1, status: 200, body: b.String()})
	all, err := c.GetAll(ctx)
	if err != nil || len(all) != 11 || all["BIG_K"] != big {
		t.Fatalf("GetAll: %d values, %v", len(all), err)
	}
	c.Get(ctx, "BIG_A")
	if n := s.count(); n != 1 {
		t.Errorf("want 1 request, got %d", n)
	}
}

// R3: 2xx answers of the wrong shape are unreadable: retried, then network.
func TestR3UnreadableShapesAreRetriedNetworkErrors(t *testing.T) {
	const byName = "/teams/" + teamID + "/secrets/by-name/API_KEY"
	const listing = "/teams/" + teamID + "/secrets" // asked after the by-name 404 for MISSING
	cases := []struct {
		name, path, body string
		call             func(*Client) error
	}{
		{"export null", "/teams/", "null", getAll},
		{"export array", "/teams/", `["A"]`, getAll},
		{"export number value", "/teams/", `{"A":"1","B":2}`, getAll},
		{"export null value", "/teams/", `{"A":null}`, getAll},
		{"export string", "/teams/", `"A"`, getAll},
		{"export then garbage", "/teams/", `{"A":"1"} x`, getAll},
		{"export truncated", "/teams/", `{"A":"1"`, getAll},
		{"by-name without value", byName, `{"secret":{}}`, getAPIKey},
		{"by-name value not a string", byName, `{"secret":{},"value":5}`, getAPIKey},
		{"by-name value null", byName, `{"secret":{},"value":null}`, getAPIKey},
		{"by-name without secret", byName, `{"value":"x"}`, getAPIKey},
		{"by-name secret not an object", byName, `{"secret":"API_KEY","value":"x"}`, getAPIKey},
		{"by-name not JSON", byName, `<html>hello</html>`, getAPIKey},
		{"by-name empty body", byName, ``, getAPIKey},
		{"listing without secrets", listing, `{"items":[],"total":0}`, getMissing},
		{"listing with secrets null", listing, `{"secrets":null}`, getMissing},
		{"listing with secrets object", listing, `{"secrets":{}}`, getMissing},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newStub(t)
			c := newTestClient(t, s, Options{Team: teamID})
			s.inject(fault{pathPrefix: tc.path, exact: tc.path != "/teams/", remaining: 100, status: 200, body: tc.body})
			err := tc.call(c.Client)
			ce := asError(t, err)
			if ce.Kind != KindNetwork || ce.Status != 0 || !errors.Is(err, ErrNetwork) {
				t.Fatalf("want a network error without status, got %#v", ce)
			}
			if !strings.Contains(ce.Message, "unreadable") {
				t.Errorf("message %q", ce.Message)
			}
			attempts := 0
			for _, r := range s.reqs() {
				if r.path == "/api/v1"+tc.path || tc.path == "/teams/" {
					attempts++
				}
			}
			if attempts != 3 {
				t.Errorf("an unreadable answer is retried like a dropped connection: %d attempts, %v", attempts, s.paths())
			}
			if got := len(c.sleeps.recorded()); got != 2 {
				t.Errorf("want 2 backoff sleeps, got %d", got)
			}
		})
	}
	// Then a good answer after an unreadable one is used.
	s := newStub(t)
	c := newTestClient(t, s, Options{Team: teamID})
	s.inject(fault{pathPrefix: "/teams/", remaining: 1, status: 200, body: "null"})
	if all, err := c.GetAll(ctx); err != nil || all["API_KEY"] != apiKeyVal {
		t.Fatalf("unreadable then good: %v, %v", all, err)
	}
	// An empty export is an empty map, not an error.
	s.inject(fault{pathPrefix: "/teams/", remaining: 1, status: 200, body: " {} \n"})
	c.ClearCache()
	if all, err := c.GetAll(ctx); err != nil || all == nil || len(all) != 0 {
		t.Fatalf("empty export: %v, %v", all, err)
	}
}

func getAll(c *Client) error     { _, err := c.GetAll(ctx); return err }
func getAPIKey(c *Client) error  { _, err := c.Get(ctx, "API_KEY"); return err }
func getMissing(c *Client) error { _, err := c.Get(ctx, "MISSING"); return err }

// R4: Retry-After forms.
func TestR4RetryAfterForms(t *testing.T) {
	now := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	cases := []struct {
		header string
		want   time.Duration
		ok     bool
	}{
		{"", 0, false},
		{"0", 0, true},
		{"7", 7 * time.Second, true},
		{" 12 ", 12 * time.Second, true},
		{now.Add(90 * time.Second).Format(httpTimeFormat), 90 * time.Second, true},
		{now.Add(-time.Hour).Format(httpTimeFormat), 0, true},
		{now.Format(httpTimeFormat), 0, true},
		{"soon", 0, false},
		{"-3", 0, false},
		{"+3", 0, false},
		{"1.5", 0, false},
		{"99999999999999999999", 0, false},
	}
	for _, tc := range cases {
		got, ok := parseRetryAfter(tc.header, now)
		if got != tc.want || ok != tc.ok {
			t.Errorf("%q: got %s, %v; want %s, %v", tc.header, got, ok, tc.want, tc.ok)
		}
	}
	// A date between whole seconds rounds up.
	if got, _ := parseRetryAfter(now.Add(90*time.Second).Format(httpTimeFormat), now.Add(-300*time.Millisecond)); got != 91*time.Second {
		t.Errorf("90.3 s: got %s, want 91s", got)
	}
	// Through the client: 0 is a header, no header is none.
	for _, tc := range []struct {
		header map[string]string
		ok     bool
	}{{map[string]string{"Retry-After": "0"}, true}, {nil, false}} {
		s := newStub(t)
		c := newTestClient(t, s, Options{Team: teamID})
		s.inject(fault{pathPrefix: "/teams/", remaining: 1, status: 429, header: tc.header})
		ce := asError(t, getAll(c.Client))
		if ce.Kind != KindRateLimited || ce.RetryAfter != 0 || ce.HasRetryAfter != tc.ok {
			t.Errorf("%v: got %#v", tc.header, ce)
		}
	}
}

// R5: redirects are never followed, with the package's client or the caller's.
func TestR5RedirectsAreAPIErrorsAndTheTokenStaysHome(t *testing.T) {
	var elsewhere atomic.Int32
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		elsewhere.Add(1)
		writeJSON(w, 200, map[string]any{})
	}))
	defer other.Close()
	callerClient := &http.Client{Timeout: time.Hour}
	for _, hc := range []*http.Client{nil, callerClient} {
		for _, status := range []int{301, 302, 307, 308} {
			s := newStub(t)
			c := newTestClient(t, s, Options{Team: teamID, HTTPClient: hc})
			s.inject(fault{pathPrefix: "/teams/", remaining: 1, status: status,
				header: map[string]string{"Location": other.URL + "/api/v1/export?token=x"}})
			err := getAll(c.Client)
			ce := asError(t, err)
			if ce.Kind != KindAPI || ce.Status != status || !errors.Is(err, ErrAPI) {
				t.Errorf("%d: want an API error with the status, got %#v", status, ce)
			}
			if !strings.Contains(ce.Message, "redirect") || strings.Contains(ce.Message, "token=x") {
				t.Errorf("%d: message %q", status, ce.Message)
			}
			if n := s.count(); n != 1 {
				t.Errorf("%d: a redirect is not retried: %d requests", status, n)
			}
		}
	}
	if n := elsewhere.Load(); n != 0 {
		t.Errorf("the redirect was followed %d times", n)
	}
	if callerClient.CheckRedirect != nil || callerClient.Timeout != time.Hour {
		t.Error("the caller's HTTPClient must not be changed")
	}
}

// R6: whitespace around the token is trimmed; other invisible characters are
// a configuration error that never shows the token.
func TestR6TokenWhitespaceIsTrimmed(t *testing.T) {
	for _, fromEnv := range []bool{false, true} {
		s := newStub(t)
		clearEnv(t)
		opts := Options{BaseURL: s.baseURL(), Team: teamID}
		padded := " \t" + testToken + "\r\n\n"
		if fromEnv {
			t.Setenv(EnvToken, padded)
		} else {
			opts.Token = padded
		}
		c, err := NewClient(opts)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.GetAll(ctx); err != nil {
			t.Fatalf("env %v: %v", fromEnv, err)
		}
		if got := s.reqs()[0].header.Get("Authorization"); got != "Bearer "+testToken {
			t.Errorf("Authorization %q", got)
		}
	}
	// A whitespace-only option counts as unset.
	clearEnv(t)
	if _, err := NewClient(Options{Token: " \n", BaseURL: "http://x/api/v1", Team: "acme"}); !errors.Is(err, ErrConfiguration) ||
		!strings.Contains(err.Error(), "CVSM_TOKEN is not set") {
		t.Errorf("blank token: %v", err)
	}
}

func TestR6TokenWithControlCharactersIsAConfigurationError(t *testing.T) {
	for _, bad := range []string{"cvsm_ab\x00cd1234", "cvsm_ab cd1234", "cvsm_ab\tcd1234", "cvsm_ab\ncd1234", "cvsm_abcé1234", "cvsm_ab\x7fcd"} {
		for _, fromEnv := range []bool{false, true} {
			clearEnv(t)
			opts := Options{BaseURL: "http://x/api/v1", Team: "acme"}
			if fromEnv {
				if strings.ContainsRune(bad, 0) {
					continue // no environment can hold a NUL
				}
				t.Setenv(EnvToken, bad)
			} else {
				opts.Token = bad
			}
			c, err := NewClient(opts)
			if c != nil || !errors.Is(err, ErrConfiguration) {
				t.Fatalf("%q: want a configuration error, got %v", bad, err)
			}
			for _, part := range []string{bad, "cvsm_ab", "cd1234"} {
				if strings.Contains(err.Error(), part) {
					t.Errorf("message %q shows the token", err.Error())
				}
			}
		}
	}
}

// R7: proxies from the environment, read when the client is created.
func TestR7ProxyFromTheEnvironmentIsReadPerClient(t *testing.T) {
	s := newStub(t)
	proxyFor := func(hits *atomic.Int32) *httptest.Server {
		// A forward proxy that sends every request to the stub.
		return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			hits.Add(1)
			if !r.URL.IsAbs() || r.URL.Host != "cvsm.example.test" {
				http.Error(w, "not a proxy request", 400)
				return
			}
			r.URL.Scheme, r.URL.Host = "http", strings.TrimPrefix(s.srv.URL, "http://")
			r.RequestURI = ""
			resp, err := http.DefaultTransport.RoundTrip(r)
			if err != nil {
				http.Error(w, err.Error(), 502)
				return
			}
			defer resp.Body.Close()
			for k, v := range resp.Header {
				w.Header()[k] = v
			}
			w.WriteHeader(resp.StatusCode)
			bufio.NewReader(resp.Body).WriteTo(w)
		}))
	}
	var hits1, hits2 atomic.Int32
	p1, p2 := proxyFor(&hits1), proxyFor(&hits2)
	defer p1.Close()
	defer p2.Close()

	clearEnv(t)
	t.Setenv("http_proxy", p1.URL)
	opts := Options{Token: testToken, BaseURL: "http://cvsm.example.test/api/v1", Team: teamID, MaxRetries: Int(0)}
	c1, err := NewClient(opts)
	if err != nil {
		t.Fatal(err)
	}
	os.Unsetenv("http_proxy")
	t.Setenv("HTTP_PROXY", p2.URL)
	c2, err := NewClient(opts)
	if err != nil {
		t.Fatal(err)
	}
	if all, err := c1.GetAll(ctx); err != nil || all["API_KEY"] != apiKeyVal {
		t.Fatalf("through proxy 1: %v, %v", all, err)
	}
	if all, err := c2.GetAll(ctx); err != nil || all["API_KEY"] != apiKeyVal {
		t.Fatalf("through proxy 2: %v, %v", all, err)
	}
	if hits1.Load() != 1 || hits2.Load() != 1 {
		t.Errorf("each client uses the proxy of its creation: %d, %d", hits1.Load(), hits2.Load())
	}

	// NO_PROXY and the https variables, checked on the transport's choice.
	t.Setenv("HTTPS_PROXY", "http://secure-proxy.example:3128")
	t.Setenv("NO_PROXY", "internal.example,.corp.example")
	c3, err := NewClient(opts)
	if err != nil {
		t.Fatal(err)
	}
	proxy := c3.httpClient.Transport.(*http.Transport).Proxy
	for target, want := range map[string]string{
		"http://cvsm.example.test/api/v1/teams":  p2.URL,
		"https://cvsm.example.test/api/v1/teams": "http://secure-proxy.example:3128",
		"http://internal.example/api/v1/teams":   "",
		"https://vault.corp.example/api/v1":      "",
	} {
		req, _ := http.NewRequest("GET", target, nil)
		u, err := proxy(req)
		got := ""
		if u != nil {
			got = u.String()
		}
		if err != nil || got != want {
			t.Errorf("%s: proxy %q, %v; want %q", target, got, err, want)
		}
	}
}

// R7: a private CA trusted through CAFile or CVSM_CA_FILE, instead of the
// system store.
func TestR7PrivateCATrustedThroughCAFile(t *testing.T) {
	s := newStub(t)
	tlsSrv := httptest.NewTLSServer(s.srv.Config.Handler)
	defer tlsSrv.Close()
	dir := t.TempDir()
	caPath := filepath.Join(dir, "ca.pem")
	pemBytes := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: tlsSrv.Certificate().Raw})
	if err := os.WriteFile(caPath, pemBytes, 0o600); err != nil {
		t.Fatal(err)
	}
	base := Options{Token: testToken, BaseURL: tlsSrv.URL + "/api/v1", Team: teamID, MaxRetries: Int(0)}

	clearEnv(t)
	c, err := NewClient(base)
	if err != nil {
		t.Fatal(err)
	}
	err = getAll(c)
	var unknown *tls.CertificateVerificationError
	if ce := asError(t, err); ce.Kind != KindNetwork || !errors.As(err, &unknown) {
		t.Errorf("without the CA: want a network error for an unknown authority, got %v", err)
	}

	withOption := base
	withOption.CAFile = caPath
	c, err = NewClient(withOption)
	if err != nil {
		t.Fatal(err)
	}
	if err := getAll(c); err != nil {
		t.Errorf("with CAFile: %v", err)
	}

	t.Setenv(EnvCAFile, caPath)
	c, err = NewClient(base)
	if err != nil {
		t.Fatal(err)
	}
	if err := getAll(c); err != nil {
		t.Errorf("with CVSM_CA_FILE: %v", err)
	}

	// Instead of the system store: a bundle without this server's CA fails.
	otherSrv := httptest.NewUnstartedServer(s.srv.Config.Handler)
	otherSrv.TLS = &tls.Config{Certificates: []tls.Certificate{selfSignedCert(t)}}
	otherSrv.StartTLS()
	defer otherSrv.Close()
	onOther := withOption
	onOther.BaseURL = otherSrv.URL + "/api/v1"
	if c, err = NewClient(onOther); err != nil {
		t.Fatal(err)
	}
	if err := getAll(c); !errors.Is(err, ErrNetwork) {
		t.Errorf("a server outside the bundle: want a network error, got %v", err)
	}
}

// selfSignedCert is a certificate for 127.0.0.1 that no bundle but its own
// trusts (httptest's TLS servers all share one certificate).
func selfSignedCert(t *testing.T) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(42),
		Subject:      pkix.Name{CommonName: "other test CA"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		IsCA:         true, BasicConstraintsValid: true,
		KeyUsage:    x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

func TestR7UnreadableCAFileIsAConfigurationError(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "not.pem")
	os.WriteFile(notPEM, []byte("hello"), 0o600)
	base := Options{Token: testToken, BaseURL: "https://cvsm.example.com/api/v1", Team: teamID}
	for _, path := range []string{filepath.Join(dir, "missing.pem"), dir, notPEM} {
		for _, fromEnv := range []bool{false, true} {
			clearEnv(t)
			opts := base
			if fromEnv {
				t.Setenv(EnvCAFile, path)
			} else {
				opts.CAFile = path
			}
			c, err := NewClient(opts)
			if c != nil || !errors.Is(err, ErrConfiguration) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), EnvCAFile) {
				t.Errorf("%s (env %v): want a configuration error naming the file, got %v", path, fromEnv, err)
			}
		}
	}
	// CAFile configures the package's transport: with HTTPClient it is an error,
	// while CVSM_CA_FILE is left to the caller's transport.
	clearEnv(t)
	opts := base
	opts.CAFile, opts.HTTPClient = notPEM, &http.Client{}
	if _, err := NewClient(opts); !errors.Is(err, ErrConfiguration) {
		t.Errorf("CAFile with HTTPClient: %v", err)
	}
	t.Setenv(EnvCAFile, notPEM)
	opts.CAFile = ""
	if _, err := NewClient(opts); err != nil {
		t.Errorf("CVSM_CA_FILE with HTTPClient: %v", err)
	}
}

// R8: inject checks every name and value before setting anything.
func TestR8InjectIsAllOrNothing(t *testing.T) {
	cases := []struct {
		body, blame, value string
	}{
		{`{"A_OK":"1","B_NUL":"bad\u0000value","C_OK":"3"}`, `"B_NUL"`, "bad"},
		{`{"A_OK":"1","1BAD":"x-value","C_OK":"3"}`, `"1BAD"`, "x-value"},
		{`{"A_OK":"1","BAD-NAME":"y-value","Z_OK":"3"}`, `"BAD-NAME"`, "y-value"},
		{`{"A_OK":"1","BAD=NAME":"z-value"}`, `"BAD=NAME"`, "z-value"},
		{`{"A_OK":"1","":"e-value"}`, `""`, "e-value"},
	}
	for _, tc := range cases {
		s := newStub(t)
		c := newTestClient(t, s, Options{Team: teamID})
		for _, name := range []string{"A_OK", "C_OK", "Z_OK"} {
			t.Setenv(name, "")
			os.Unsetenv(name)
		}
		s.inject(fault{pathPrefix: "/teams/", remaining: 1, status: 200, body: tc.body})
		names, err := c.Inject(ctx, Overwrite(true))
		ce := asError(t, err)
		if ce.Kind != KindConfiguration || !errors.Is(err, ErrConfiguration) || names != nil {
			t.Errorf("%s: want a configuration error and no names, got %v, %#v", tc.body, names, ce)
		}
		if !strings.Contains(ce.Message, "secret "+tc.blame) || strings.Contains(ce.Message, tc.value) {
			t.Errorf("%s: message %q must name the secret and not its value", tc.body, ce.Message)
		}
		for _, name := range []string{"A_OK", "C_OK", "Z_OK"} {
			if _, set := os.LookupEnv(name); set {
				t.Errorf("%s: %s was set", tc.body, name)
			}
		}
	}
	// A value is checked even with NUL in a name that is kept.
	s := newStub(t)
	c := newTestClient(t, s, Options{Team: teamID})
	t.Setenv("KEPT", "mine")
	s.inject(fault{pathPrefix: "/teams/", remaining: 1, status: 200, body: `{"A_OK":"1","KEPT":"a\u0000b"}`})
	t.Setenv("A_OK", "")
	os.Unsetenv("A_OK")
	if names, err := c.Inject(ctx); !errors.Is(err, ErrConfiguration) || names != nil || os.Getenv("A_OK") != "" {
		t.Errorf("NUL in a kept variable's value: %v, %v", names, err)
	}
}

// R9: a 400 to the by-name, listing or export request and a 404 to the
// listing or export request are configuration errors with the status; a
// 404 to the by-name read is followed by the listing, which decides.
func TestR9WrongBaseURLTeamOrEnvironmentIsConfiguration(t *testing.T) {
	const byName = "/teams/" + teamID + "/secrets/by-name/"
	const listing = "/teams/" + teamID + "/secrets"
	cases := []struct {
		name, path string
		exact      bool
		status     int
		call       func(*Client) error
		kind       Kind
		requestID  int // which answer's X-Request-Id the error carries (0: the last)
	}{
		{"listing 404", listing, true, 404, getMissing, KindConfiguration, 0},
		{"export 404", "/teams/", false, 404, getAll, KindConfiguration, 0},
		{"by-name 400", byName, false, 400, getAPIKey, KindConfiguration, 0},
		{"listing 400", listing, true, 400, getMissing, KindConfiguration, 0},
		{"export 400", "/teams/", false, 400, getAll, KindConfiguration, 0},
		{"by-name 404, then a listing", byName, false, 404, getAPIKey, KindNotFound, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newStub(t)
			c := newTestClient(t, s, Options{Team: teamID})
			s.inject(fault{pathPrefix: tc.path, exact: tc.exact, remaining: 10, status: tc.status, body: `{"error":"tidak ada"}`})
			ce := asError(t, tc.call(c.Client))
			wantID := s.lastRequestID()
			if tc.requestID != 0 {
				wantID = s.requestID(tc.requestID)
			}
			if ce.Kind != tc.kind || ce.Status != tc.status || ce.RequestID != wantID {
				t.Errorf("got %#v, want kind %s status %d request id %s", ce, tc.kind, tc.status, wantID)
			}
		})
	}
	// Against the stub's real routes: an unknown team id or slug, a base URL
	// without /api/v1 and an environment the server rejects.
	s := newStub(t)
	for _, team := range []string{otherTeam, "no-such-team"} {
		c := newTestClient(t, s, Options{Team: team})
		if ce := asError(t, getAll(c.Client)); ce.Kind != KindConfiguration || ce.Status != 404 || !strings.Contains(ce.Message, "team") {
			t.Errorf("unknown team %s, GetAll: %#v", team, ce)
		}
		if ce := asError(t, getAPIKey(c.Client)); ce.Kind != KindConfiguration || ce.Status != 404 || !strings.Contains(ce.Message, team) {
			t.Errorf("unknown team %s, Get: %#v", team, ce)
		}
	}
	c := newTestClient(t, s, Options{BaseURL: s.srv.URL})
	if ce := asError(t, getAPIKey(c.Client)); ce.Kind != KindConfiguration || ce.Status != 404 || !strings.Contains(ce.Message, "/api/v1") {
		t.Errorf("base URL without /api/v1: %#v", ce)
	}
	c = newTestClient(t, s, Options{Environment: "prod"})
	before := s.count()
	if ce := asError(t, getAPIKey(c.Client)); ce.Kind != KindConfiguration || ce.Status != 400 || !strings.Contains(ce.Message, EnvEnvironment) {
		t.Errorf("rejected environment: %#v", ce)
	}
	if n := s.count() - before; n != 1 {
		t.Errorf("a 400 to the by-name read asks nothing more: %d requests", n)
	}
}

// R10: invalid names are not found without a request.
func TestR10InvalidNamesAreNotFoundWithoutARequest(t *testing.T) {
	s := newStub(t)
	c := newTestClient(t, s, Options{})
	for _, name := range []string{"", "1ABC", "API-KEY", "API KEY", "A.B", "é", "A\x00B", strings.Repeat("A", 256), "../teams"} {
		ce := asError(t, getName(c.Client, name))
		if ce.Kind != KindNotFound || ce.Status != 0 || !strings.Contains(ce.Message, "not a valid secret name") {
			t.Errorf("%q: got %#v", name, ce)
		}
	}
	if n := s.count(); n != 0 {
		t.Errorf("invalid names make no request, got %v", s.paths())
	}
	if ce := asError(t, getName(c.Client, strings.Repeat("A", 255))); ce.Kind != KindNotFound || strings.Contains(ce.Message, "valid") {
		t.Errorf("255 characters is a valid name: %#v", ce)
	}
	if n := s.count(); n == 0 {
		t.Error("a valid name is looked up")
	}
}

func getName(c *Client, name string) error { _, err := c.Get(ctx, name); return err }

// R11: errors carry the request id of their answer and the suggestion.
func TestR11ErrorsCarryRequestIDAndSuggestion(t *testing.T) {
	s := newStub(t)
	c := newTestClient(t, s, Options{Team: teamID})
	ce := asError(t, getName(c.Client, "api_key"))
	if ce.Kind != KindNotFound || ce.Suggestion != "API_KEY" || ce.RequestID != s.requestID(1) || ce.Status != 404 {
		t.Errorf("an absent name carries the by-name read's 404 and request id: %#v", ce)
	}
	ce = asError(t, getName(c.Client, "NOT_THERE"))
	if ce.Suggestion != "" || ce.RequestID != s.requestID(3) {
		t.Errorf("no suggestion: %#v", ce)
	}
	s.inject(fault{pathPrefix: "/teams/", remaining: 10, drop: true})
	if ce = asError(t, getName(c.Client, "DATABASE_URL")); ce.Kind != KindNetwork || ce.RequestID != "" {
		t.Errorf("no answer, no request id: %#v", ce)
	}
	clearEnv(t)
	if _, err := NewClient(Options{}); asError(t, err).RequestID != "" {
		t.Error("configuration errors before any request have no request id")
	}
}

// R12: no secret value in printed errors either.
func TestR12ErrorsPrintNoValue(t *testing.T) {
	s := newStub(t)
	c := newTestClient(t, s, Options{Team: teamID})
	s.inject(fault{pathPrefix: "/teams/", remaining: 100, status: 200, body: `{"A":"` + apiKeyVal + `","B":7}`})
	err := getAll(c.Client)
	if out := printedForms(err); strings.Contains(out, apiKeyVal) || strings.Contains(out, testToken) {
		t.Errorf("printed error holds a value:\n%s", out)
	}
}

// R13: zero means default, NoCache means no cache (also from the
// environment's 0), for the client and through Options.
func TestR13ZeroCacheTTLMeansDefaultAndNoCacheMeansNone(t *testing.T) {
	clearEnv(t)
	base := Options{Token: testToken, BaseURL: "http://x/api/v1", Team: "acme"}
	c, _ := NewClient(base)
	if c.CacheTTL() != DefaultCacheTTL {
		t.Errorf("zero CacheTTL: %s", c.CacheTTL())
	}
	t.Setenv(EnvCacheTTL, "0")
	c, _ = NewClient(base)
	if c.CacheTTL() != 0 {
		t.Errorf("CVSM_CACHE_TTL=0: %s", c.CacheTTL())
	}
}

// CVSM_TIMEOUT and CVSM_MAX_RETRIES fill the options left zero.
func TestTimeoutAndMaxRetriesFromTheEnvironment(t *testing.T) {
	base := Options{Token: testToken, BaseURL: "http://x/api/v1", Team: "acme"}
	clearEnv(t)
	t.Setenv(EnvTimeout, "2.5")
	t.Setenv(EnvMaxRetries, "0")
	c, err := NewClient(base)
	if err != nil || c.Timeout() != 2500*time.Millisecond || c.MaxRetries() != 0 {
		t.Fatalf("from the environment: %v, %v", c, err)
	}
	explicit := base
	explicit.Timeout, explicit.MaxRetries = time.Second, Int(4)
	c, err = NewClient(explicit)
	if err != nil || c.Timeout() != time.Second || c.MaxRetries() != 4 {
		t.Fatalf("options win: %v, %v", c, err)
	}
	for _, bad := range []string{"0", "-1", "abc", "1e3", "10s", "NaN", "Inf", "0x10"} {
		clearEnv(t)
		t.Setenv(EnvTimeout, bad)
		if _, err := NewClient(base); !errors.Is(err, ErrConfiguration) || !strings.Contains(err.Error(), EnvTimeout) {
			t.Errorf("CVSM_TIMEOUT=%q: %v", bad, err)
		}
	}
	for _, bad := range []string{"-1", "1.5", "two", "+1"} {
		clearEnv(t)
		t.Setenv(EnvMaxRetries, bad)
		if _, err := NewClient(base); !errors.Is(err, ErrConfiguration) || !strings.Contains(err.Error(), EnvMaxRetries) {
			t.Errorf("CVSM_MAX_RETRIES=%q: %v", bad, err)
		}
	}
	clearEnv(t)
	t.Setenv(EnvTimeout, " ")
	t.Setenv(EnvMaxRetries, "")
	if c, err := NewClient(base); err != nil || c.Timeout() != DefaultTimeout || c.MaxRetries() != DefaultMaxRetries {
		t.Errorf("empty variables count as unset: %v, %v", c, err)
	}
}
