#!/usr/bin/env bats
# proxy.bats - the proxy variables (curl's own, plus HTTP_PROXY as the other SDKs read it) and the
# transport seam, CVSM_CURL_CONFIG / --curl-config.

load helpers

setup() {
  common_setup
  # A host that does not exist: only a proxy can reach it (the stub acts as one).
  export CVSM_BASE_URL=http://cvsm.invalid/api/v1 CVSM_TIMEOUT=3 CVSM_CACHE_TTL=0 CVSM_TEAM=$TEAM_ID
  unset REQUEST_METHOD
}

# proxied_requests: how many requests reached the stub as a proxy, for cvsm.invalid.
proxied_requests() {
  stub_requests | jq '[.[] | select(.proxied and .host == "cvsm.invalid")] | length'
}

# http_proxy carrying the requests, no_proxy naming the host, a list or a domain suffix, NO_PROXY
# alone, a no_proxy of other hosts and a proxy where nothing listens are the conformance cases
# proxy_from_environment, proxy_variable_forms, no_proxy_domain_suffix_goes_direct and
# refused_proxy_is_network_error.
@test "HTTP_PROXY is honoured too, as the other cvsm SDKs do, except under CGI (REQUEST_METHOD set)" {
  HTTP_PROXY=$(stub_url) run cvsm_get_all --json
  [ "$status" -eq 0 ]
  [ "$(proxied_requests)" -eq 1 ]
  HTTP_PROXY=$(stub_url) REQUEST_METHOD=GET CVSM_MAX_RETRIES=0 run cvsm_get_all --json
  [ "$status" -eq 8 ]
  [ "$(proxied_requests)" -eq 1 ]
}

@test "http_proxy wins over HTTP_PROXY" {
  http_proxy=$(stub_url) HTTP_PROXY=http://127.0.0.1:9 run cvsm_get API_KEY
  [ "$output" = k-prod ]
}

@test "CVSM_CURL_CONFIG adds curl options to every request (the transport seam)" {
  export CVSM_BASE_URL
  CVSM_BASE_URL="$(stub_url)/api/v1"
  printf 'header = "X-Extra: seam"\n# a comment\n' >"$BATS_TEST_TMPDIR/curl.cfg"
  CVSM_CURL_CONFIG="$BATS_TEST_TMPDIR/curl.cfg" run cvsm_get API_KEY
  [ "$output" = k-prod ]
  [ "$(stub_requests | jq '[.[] | select(.headers["x-extra"] == "seam")] | length')" -eq 1 ]
  run cvsm_get_all --curl-config "$BATS_TEST_TMPDIR/curl.cfg"
  [ "$status" -eq 0 ]
  [ "$(stub_requests | jq '[.[] | select(.headers["x-extra"] == "seam")] | length')" -eq 2 ]
}

@test "the SDK's own settings win over CVSM_CURL_CONFIG: time limit, redirects, protocols" {
  export CVSM_BASE_URL
  CVSM_BASE_URL="$(stub_url)/api/v1"
  printf 'max-time = 100\nlocation\nproto = "=all"\n' >"$BATS_TEST_TMPDIR/curl.cfg"
  stub_fault '[{"path": "/api/v1/teams/'"$TEAM_ID"'/secrets/by-name/API_KEY", "status": 302, "headers": {"Location": "/elsewhere"}, "count": 1}]'
  CVSM_CURL_CONFIG="$BATS_TEST_TMPDIR/curl.cfg" run cvsm_get API_KEY
  [ "$status" -eq 7 ]
  [ "$(count_requests /elsewhere)" -eq 0 ]
  stub_fault '[{"path": "/api/v1/teams/'"$TEAM_ID"'/secrets/by-name/DB", "status": 200, "body": "{\"secret\": {}, \"value\": \"slow\"}", "delay": 3, "count": 1}]'
  CVSM_CURL_CONFIG="$BATS_TEST_TMPDIR/curl.cfg" CVSM_TIMEOUT=1 CVSM_MAX_RETRIES=0 run cvsm_get DB
  [ "$status" -eq 8 ]
}
