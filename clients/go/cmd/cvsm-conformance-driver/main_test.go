package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
)

// call sends one request line through the driver and decodes the answer.
func call(t *testing.T, d *driver, line string) map[string]any {
	t.Helper()
	resp, _ := d.handle([]byte(line))
	raw, err := json.Marshal(resp)
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func errorOf(t *testing.T, resp map[string]any) map[string]any {
	t.Helper()
	e, ok := resp["error"].(map[string]any)
	if !ok || resp["ok"] != false {
		t.Fatalf("want a failure, got %v", resp)
	}
	return e
}

func clearCVSMEnv(t *testing.T) {
	for _, name := range []string{"CVSM_TOKEN", "CVSM_BASE_URL", "CVSM_TEAM", "CVSM_ENVIRONMENT", "CVSM_CACHE_TTL",
		"CVSM_TIMEOUT", "CVSM_MAX_RETRIES", "CVSM_CA_FILE", "CVSM_STALE_IF_ERROR"} {
		t.Setenv(name, "") // restores the variable after the test
		os.Unsetenv(name)
	}
}

func TestNewClientWithoutTokenIsConfigurationAndLeavesNoClient(t *testing.T) {
	clearCVSMEnv(t)
	d := &driver{}
	ok := call(t, d, `{"id":1,"op":"new_client","args":{"options":{"token":"cvsm_abc12345","base_url":"http://127.0.0.1:9/api/v1","team":"acme"}}}`)
	if ok["ok"] != true {
		t.Fatal(ok)
	}
	e := errorOf(t, call(t, d, `{"id":2,"op":"new_client","args":{"options":{"base_url":"http://x/api/v1","team":"acme"}}}`))
	if e["kind"] != "configuration" || !strings.Contains(e["message"].(string), "CVSM_TOKEN is not set") || e["status"] != nil || e["retry_after"] != nil {
		t.Errorf("error %v", e)
	}
	for _, key := range []string{"kind", "message", "status", "retry_after", "request_id", "suggestion"} {
		if _, present := e[key]; !present {
			t.Errorf("every error object has %q: %v", key, e)
		}
	}
	if d.client != nil {
		t.Error("a failed new_client must leave no client")
	}
}

func TestNewClientReportsTheEffectiveConfigAndDescribeHidesTheToken(t *testing.T) {
	clearCVSMEnv(t)
	t.Setenv("CVSM_ENVIRONMENT", "staging")
	d := &driver{}
	resp := call(t, d, `{"id":7,"op":"new_client","args":{"options":{"token":"cvsm_abc12345","base_url":"http://127.0.0.1:9/api/v1/","team":"acme","cache_ttl":0,"timeout":2.5,"max_retries":0}}}`)
	if resp["id"] != float64(7) || resp["ok"] != true {
		t.Fatal(resp)
	}
	cfg := resp["result"].(map[string]any)["config"].(map[string]any)
	want := map[string]any{"base_url": "http://127.0.0.1:9/api/v1", "team": "acme", "environment": "staging",
		"cache_ttl": float64(0), "timeout": 2.5, "max_retries": float64(0), "stale_if_error": float64(0)}
	for k, v := range want {
		if cfg[k] != v {
			t.Errorf("config[%s] = %v, want %v", k, cfg[k], v)
		}
	}
	if _, has := cfg["token"]; has {
		t.Error("config must not hold the token")
	}
	text := call(t, d, `{"id":8,"op":"describe","args":{}}`)["result"].(map[string]any)["text"].(string)
	if strings.Contains(text, "cvsm_abc12345") || !strings.Contains(text, "acme") {
		t.Errorf("describe: %s", text)
	}
}

func TestErrorsCarryKindStatusRetryAfterAndRequestID(t *testing.T) {
	clearCVSMEnv(t)
	retryAfter := "12"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Request-Id", "req-77")
		switch {
		case strings.HasSuffix(r.URL.Path, "/export"):
			if retryAfter != "" {
				w.Header().Set("Retry-After", retryAfter)
			}
			w.WriteHeader(429)
			w.Write([]byte(`{"error":"terlalu banyak"}`))
		case strings.HasSuffix(r.URL.Path, "/secrets"):
			w.Write([]byte(`{"secrets":[{"id":"1","name":"API_KEY","environment":"production"}],"total":1}`))
		default:
			w.WriteHeader(404)
			w.Write([]byte(`{"error":"tidak ada"}`))
		}
	}))
	defer srv.Close()
	d := &driver{}
	call(t, d, `{"id":1,"op":"new_client","args":{"options":{"token":"cvsm_abc12345","base_url":"`+srv.URL+`/api/v1","team":"6f1c2a9e-4b7d-4c1e-9a55-3d2f8e7b1a00","cache_ttl":0}}}`)
	e := errorOf(t, call(t, d, `{"id":2,"op":"get_all","args":{}}`))
	if e["kind"] != "rate_limited" || e["status"] != float64(429) || e["retry_after"] != float64(12) || e["request_id"] != "req-77" || e["suggestion"] != nil {
		t.Errorf("error %v", e)
	}
	retryAfter = "0"
	if e := errorOf(t, call(t, d, `{"id":3,"op":"get_all","args":{}}`)); e["retry_after"] != float64(0) {
		t.Errorf("Retry-After: 0 is 0: %v", e)
	}
	retryAfter = ""
	if e := errorOf(t, call(t, d, `{"id":4,"op":"get_all","args":{}}`)); e["retry_after"] != nil {
		t.Errorf("no Retry-After is null: %v", e)
	}
	e = errorOf(t, call(t, d, `{"id":5,"op":"get","args":{"name":"api_key"}}`))
	if e["kind"] != "not_found" || e["suggestion"] != "API_KEY" || e["request_id"] != "req-77" || e["status"] != float64(404) {
		t.Errorf("not found: %v", e)
	}
	e = errorOf(t, call(t, d, `{"id":6,"op":"get","args":{"name":"API_KEY"}}`))
	if e["kind"] != "not_found" || e["status"] != float64(404) || e["suggestion"] != nil {
		t.Errorf("by-name 404 with the name in the listing: %v", e)
	}
}

func TestNewClientPassesTheCAFile(t *testing.T) {
	clearCVSMEnv(t)
	d := &driver{}
	e := errorOf(t, call(t, d, `{"id":1,"op":"new_client","args":{"options":{"token":"cvsm_abc12345","base_url":"https://x/api/v1","team":"acme","ca_file":"/nonexistent/ca.pem"}}}`))
	if e["kind"] != "configuration" || !strings.Contains(e["message"].(string), "/nonexistent/ca.pem") {
		t.Errorf("error %v", e)
	}
}

func TestEnvOpsAndUnknownOps(t *testing.T) {
	d := &driver{}
	t.Setenv("CVSM_DRIVER_TEST_A", "")
	call(t, d, `{"id":1,"op":"set_env","args":{"set":{"CVSM_DRIVER_TEST_A":"1"},"unset":["CVSM_DRIVER_TEST_B"]}}`)
	values := call(t, d, `{"id":2,"op":"get_env","args":{"names":["CVSM_DRIVER_TEST_A","CVSM_DRIVER_TEST_B"]}}`)["result"].(map[string]any)["values"].(map[string]any)
	if values["CVSM_DRIVER_TEST_A"] != "1" || values["CVSM_DRIVER_TEST_B"] != nil {
		t.Errorf("values %v", values)
	}
	if e := errorOf(t, call(t, d, `{"id":3,"op":"fly","args":{}}`)); e["kind"] != "unsupported" {
		t.Errorf("error %v", e)
	}
	if e := errorOf(t, call(t, d, `{"id":4,"op":"get","args":{"name":"X"}}`)); e["kind"] != "internal" {
		t.Errorf("get without a client: %v", e)
	}
	if _, stop := d.handle([]byte(`{"id":5,"op":"shutdown"}`)); !stop {
		t.Error("shutdown must stop the driver")
	}
}

func TestStaleIfErrorOptionAndEnvironment(t *testing.T) {
	clearCVSMEnv(t)
	t.Setenv("CVSM_STALE_IF_ERROR", "300")
	d := &driver{}
	config := func(options string) any {
		resp := call(t, d, `{"id":1,"op":"new_client","args":{"options":{"token":"cvsm_abc12345","base_url":"http://127.0.0.1:9/api/v1","team":"acme"`+options+`}}}`)
		if resp["ok"] != true {
			t.Fatalf("new_client%s: %v", options, resp)
		}
		return resp["result"].(map[string]any)["config"].(map[string]any)["stale_if_error"]
	}
	if got := config(""); got != float64(300) {
		t.Errorf("from CVSM_STALE_IF_ERROR: %v", got)
	}
	if got := config(`,"stale_if_error":5`); got != float64(5) {
		t.Errorf("option: %v", got)
	}
	if got := config(`,"stale_if_error":0`); got != float64(0) {
		t.Errorf("an explicit 0 wins over the variable: %v", got)
	}
	t.Setenv("CVSM_STALE_IF_ERROR", "soon")
	if e := errorOf(t, call(t, d, `{"id":2,"op":"new_client","args":{"options":{"token":"cvsm_abc12345","base_url":"http://x/api/v1","team":"acme"}}}`)); e["kind"] != "configuration" ||
		!strings.Contains(e["message"].(string), "CVSM_STALE_IF_ERROR") {
		t.Errorf("bad variable: %v", e)
	}
}

func TestStaleIsReportedOnlyWhenTheSDKSaysSo(t *testing.T) {
	clearCVSMEnv(t)
	var down atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if down.Load() {
			w.WriteHeader(503)
			return
		}
		if strings.HasSuffix(r.URL.Path, "/export") {
			w.Write([]byte(`{"KEPT":"kept-value"}`))
			return
		}
		w.Write([]byte(`{"secret":{"name":"KEPT"},"value":"kept-value"}`))
	}))
	defer srv.Close()
	d := &driver{}
	call(t, d, `{"id":1,"op":"new_client","args":{"options":{"token":"cvsm_abc12345","base_url":"`+srv.URL+`/api/v1","team":"acme","cache_ttl":0,"stale_if_error":60,"max_retries":0}}}`)
	result := func(resp map[string]any) map[string]any {
		t.Helper()
		if resp["ok"] != true {
			t.Fatalf("want success, got %v", resp)
		}
		return resp["result"].(map[string]any)
	}
	fresh := result(call(t, d, `{"id":2,"op":"get","args":{"name":"KEPT"}}`))
	freshAll := result(call(t, d, `{"id":3,"op":"get_all","args":{}}`))
	if _, has := fresh["stale"]; has || fresh["value"] != "kept-value" {
		t.Errorf("a fresh get has no stale key: %v", fresh)
	}
	if _, has := freshAll["stale"]; has {
		t.Errorf("a fresh get_all has no stale key: %v", freshAll)
	}
	down.Store(true)
	stale := result(call(t, d, `{"id":4,"op":"get","args":{"name":"KEPT"}}`))
	staleAll := result(call(t, d, `{"id":5,"op":"get_all","args":{}}`))
	if stale["stale"] != true || stale["value"] != "kept-value" {
		t.Errorf("stale get: %v", stale)
	}
	if staleAll["stale"] != true || staleAll["values"].(map[string]any)["KEPT"] != "kept-value" {
		t.Errorf("stale get_all: %v", staleAll)
	}
	call(t, d, `{"id":6,"op":"clear_cache","args":{}}`)
	if e := errorOf(t, call(t, d, `{"id":7,"op":"get","args":{"name":"KEPT"}}`)); e["kind"] != "api" || e["status"] != float64(503) {
		t.Errorf("after clear_cache: %v", e)
	}
}

func TestAValueThatDoesNotOpenIsKindDecryption(t *testing.T) {
	clearCVSMEnv(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Request-Id", "req-9")
		w.Write([]byte(`{"secret":{"name":"DATABASE_URL"},"value":"cvsm-e2e1.2.x.1.AA.AA","e2e":true}`))
	}))
	defer srv.Close()
	key := strings.Repeat("A", 43)
	token := "cvsm_" + strings.Repeat("0f", 32) + "." + key + ".1." + strings.Repeat("A", 43)
	d := &driver{}
	call(t, d, `{"id":1,"op":"new_client","args":{"options":{"token":"`+token+`","base_url":"`+srv.URL+`/api/v1","team":"acme"}}}`)
	e := errorOf(t, call(t, d, `{"id":2,"op":"get","args":{"name":"DATABASE_URL"}}`))
	if e["kind"] != "decryption" || e["status"] != nil || e["request_id"] != "req-9" || strings.Contains(e["message"].(string), "cvsm-e2e1.2.x") {
		t.Errorf("error %v", e)
	}
	text := call(t, d, `{"id":3,"op":"describe","args":{}}`)["result"].(map[string]any)["text"].(string)
	if strings.Contains(text, key) || strings.Contains(text, "0f0f0f0f") {
		t.Errorf("describe: %s", text)
	}
}
