#!/usr/bin/env bats
# errors.bats - exit codes and messages per HTTP status, retries with jittered backoff, timeouts,
# network errors, and secrecy of the token and the values in messages and command lines.

load helpers

setup_file() { stub_start; }
teardown_file() { stub_stop; }
setup() { common_setup; }

SECRET_PATH="/api/v1/teams/acme/secrets/by-name/API_KEY"

# fault_on_get STATUS [EXTRA_JSON_FIELDS]: the next fetch of API_KEY's value answers STATUS.
fault_on_get() {
  stub_fault "[{\"path\": \"$SECRET_PATH\", \"status\": $1, \"count\": ${3:-1}${2:+, $2}}]"
}

@test "HTTP 401 is an authentication error: exit 3 and one line with the status and the server message" {
  fault_on_get 401
  run --separate-stderr cvsm_get API_KEY
  [ "$status" -eq 3 ]
  [ "$output" = "" ]
  [ "$stderr" = "cvsm: HTTP 401: kesalahan buatan" ]
}

@test "a token the server does not know is an authentication error" {
  CVSM_TOKEN=$OTHER_TOKEN run --separate-stderr cvsm_get API_KEY
  [ "$status" -eq 3 ]
  [ "$stderr" = "cvsm: HTTP 401: token tidak valid" ]
}

@test "HTTP 403 is permission denied: exit 4" {
  fault_on_get 403
  run --separate-stderr cvsm_get API_KEY
  [ "$status" -eq 4 ]
  [ "$stderr" = "cvsm: HTTP 403: kesalahan buatan" ]
}

@test "HTTP 404 to the by-name read, then a listing, is not found: exit 5, status 404, the by-name answer's request id" {
  fault_on_get 404
  local rc=0
  cvsm_get API_KEY 2>"$BATS_TEST_TMPDIR/err" || rc=$?
  [ "$rc" -eq 5 ]
  [ "$(cat "$BATS_TEST_TMPDIR/err")" = 'cvsm: secret "API_KEY" not found in production' ]
  [ "$CVSM_ERROR_STATUS" = 404 ]
  [ "$CVSM_ERROR_REQUEST_ID" = req-1 ]
  [ "$CVSM_ERROR_SUGGESTION" = "" ]
  [ "$(stub_requests | jq -c '[.[] | [.path, .query]]')" = '[["/api/v1/teams/acme/secrets/by-name/API_KEY","environment=production"],["/api/v1/teams/acme/secrets","environment=production&search=API_KEY"]]' ]
}

@test "HTTP 429 is rate limited: exit 6 at once, with the Retry-After seconds in the message" {
  fault_on_get 429 '"retry_after": "7"' 5
  run --separate-stderr cvsm_get API_KEY
  [ "$status" -eq 6 ]
  [ "$stderr" = "cvsm: HTTP 429: kesalahan buatan (retry after 7s)" ]
  [ "$(count_requests /by-name/API_KEY)" -eq 1 ]
}

@test "HTTP 429 without a usable Retry-After still says rate limited" {
  fault_on_get 429 '"retry_after": "soon"'
  run --separate-stderr cvsm_get API_KEY
  [ "$status" -eq 6 ]
  [ "$stderr" = "cvsm: HTTP 429: kesalahan buatan" ]
}

@test "other statuses are API errors: exit 7 with the status" {
  fault_on_get 500
  run --separate-stderr cvsm_get API_KEY
  [ "$status" -eq 7 ]
  [ "$stderr" = "cvsm: HTTP 500: kesalahan buatan" ]
  [ "$(count_requests /by-name/API_KEY)" -eq 1 ]
  fault_on_get 409 '"body": "<html>no json</html>"'
  run --separate-stderr cvsm_get API_KEY
  [ "$status" -eq 7 ]
  [ "$stderr" = "cvsm: HTTP 409" ]
}

@test "no 4xx status is ever retried" {
  local st
  for st in 400 401 403 404 409 422 429; do
    stub_reset
    fault_on_get "$st" '' 5
    run cvsm_get API_KEY
    [ "$status" -ne 0 ]
    [ "$(count_requests /by-name/API_KEY)" -eq 1 ]
  done
}

@test "502, 503 and 504 are retried, and the call succeeds when a retry does" {
  stub_fault "[{\"path\": \"$SECRET_PATH\", \"status\": 503, \"count\": 1},
               {\"path\": \"$SECRET_PATH\", \"status\": 502, \"count\": 1}]"
  run cvsm_get API_KEY
  [ "$status" -eq 0 ]
  [ "$output" = "k-prod" ]
  [ "$(count_requests /by-name/API_KEY)" -eq 3 ]
}

@test "after max_retries (default 2) more attempts a 503 is an API error" {
  fault_on_get 503 '' 10
  run --separate-stderr cvsm_get API_KEY
  [ "$status" -eq 7 ]
  [ "$stderr" = "cvsm: HTTP 503: kesalahan buatan (after 3 attempts)" ]
  [ "$(count_requests /by-name/API_KEY)" -eq 3 ]
}

@test "CVSM_MAX_RETRIES sets the number of retries, and 0 turns them off" {
  fault_on_get 504 '' 10
  CVSM_MAX_RETRIES=0 run cvsm_get API_KEY
  [ "$status" -eq 7 ]
  [ "$(count_requests /by-name/API_KEY)" -eq 1 ]
  CVSM_MAX_RETRIES=3 run cvsm_get API_KEY
  [ "$(count_requests /by-name/API_KEY)" -eq 5 ]
  run cvsm_get --max-retries 1 API_KEY
  [ "$(count_requests /by-name/API_KEY)" -eq 7 ]
}

@test "each retry first sleeps a random time between 0 and 0.1 * 2**attempt seconds" {
  mkdir "$BATS_TEST_TMPDIR/bin"
  printf '#!/bin/sh\necho "$1" >>"%s"\n' "$BATS_TEST_TMPDIR/sleeps" >"$BATS_TEST_TMPDIR/bin/sleep"
  chmod +x "$BATS_TEST_TMPDIR/bin/sleep"
  fault_on_get 503 '' 40

  for _ in $(seq 1 10); do
    PATH="$BATS_TEST_TMPDIR/bin:$PATH" CVSM_MAX_RETRIES=3 run cvsm_get API_KEY
    [ "$status" -eq 7 ]
  done
  [ "$(wc -l <"$BATS_TEST_TMPDIR/sleeps")" -eq 30 ]
  # Lines 1, 4, 7... are the first retry of a call, 2, 5, 8... the second, 3, 6, 9... the third.
  awk '{ limit = 0.1 * 2 ^ ((NR - 1) % 3); if ($1 !~ /^[0-9]+\.[0-9][0-9][0-9]$/ || $1 + 0 > limit) { print "bad sleep " $1 " on line " NR; bad = 1 } }
       END { exit bad }' "$BATS_TEST_TMPDIR/sleeps"
  # Jitter: the 30 sleeps are not all the same.
  [ "$(sort -u "$BATS_TEST_TMPDIR/sleeps" | wc -l)" -gt 5 ]
}

@test "a dropped connection is a network error, retried, and the call succeeds when a retry does" {
  stub_fault "[{\"path\": \"$SECRET_PATH\", \"drop\": true, \"count\": 2}]"
  run cvsm_get API_KEY
  [ "$status" -eq 0 ]
  [ "$output" = "k-prod" ]
  [ "$(count_requests /by-name/API_KEY)" -eq 3 ]
}

@test "a connection that keeps dropping is a network error (exit 8) after the retries" {
  stub_fault "[{\"path\": \"$SECRET_PATH\", \"drop\": true, \"count\": 10}]"
  run --separate-stderr cvsm_get API_KEY
  [ "$status" -eq 8 ]
  [[ $stderr == "cvsm: network error: "*" (after 3 attempts)" ]]
  [ "$(count_requests /by-name/API_KEY)" -eq 3 ]
}

@test "a refused connection is a network error" {
  CVSM_BASE_URL=http://127.0.0.1:9/api/v1 CVSM_MAX_RETRIES=0 run --separate-stderr cvsm_get API_KEY
  [ "$status" -eq 8 ]
  [ "$stderr" = "cvsm: network error: could not connect to the server" ]
}

@test "a response that is not HTTP is a network error" {
  stub_fault "[{\"path\": \"$SECRET_PATH\", \"garbage\": true, \"count\": 10}]"
  CVSM_MAX_RETRIES=1 run --separate-stderr cvsm_get API_KEY
  [ "$status" -eq 8 ]
  [ "$(count_requests /by-name/API_KEY)" -eq 2 ]
}

@test "an unreadable 200 body is a network error after the retries" {
  fault_on_get 200 '"body": "{not json"' 10
  run --separate-stderr cvsm_get API_KEY
  [ "$status" -eq 8 ]
  [ "$stderr" = "cvsm: network error: unreadable response from the server (HTTP 200) (after 3 attempts)" ]
  [ "$(count_requests /by-name/API_KEY)" -eq 3 ]
}

@test "CVSM_TIMEOUT bounds each attempt, and a timeout is a network error" {
  fault_on_get 200 '"delay": 3' 1
  local start=$SECONDS
  CVSM_TIMEOUT=0.5 CVSM_MAX_RETRIES=0 run --separate-stderr cvsm_get API_KEY
  [ "$status" -eq 8 ]
  [ "$stderr" = "cvsm: network error: timed out after 0.5s" ]
  [ $((SECONDS - start)) -lt 3 ]
}

@test "a timed-out attempt is retried" {
  fault_on_get 200 '"delay": 2' 1
  CVSM_TIMEOUT=0.5 run cvsm_get API_KEY
  [ "$status" -eq 0 ]
  [ "$output" = "k-prod" ]
}

@test "cvsm_get_all maps errors the same way" {
  stub_fault '[{"path": "/api/v1/teams/acme/secrets/export", "status": 403, "count": 1}]'
  run cvsm_get_all
  [ "$status" -eq 4 ]
  stub_fault '[{"path": "/api/v1/teams/acme/secrets/export", "status": 503, "count": 1}]'
  run cvsm_get_all
  [ "$status" -eq 0 ]
}

@test "an error message never contains the token, even when the server echoes it" {
  fault_on_get 409 "\"body\": \"{\\\"error\\\": \\\"bad token $TOKEN\\\"}\""
  run --separate-stderr cvsm_get API_KEY
  [ "$status" -eq 7 ]
  [[ $stderr != *"$TOKEN"* ]]
  [ "$stderr" = "cvsm: HTTP 409: bad token [redacted]" ]
}

@test "a server message stays on one line" {
  fault_on_get 500 '"body": "{\"error\": \"line one\\nline two\"}"'
  run --separate-stderr cvsm_get API_KEY
  [ "$stderr" = "cvsm: HTTP 500: line one line two" ]
}

@test "the token and values never appear on a command line (curl gets the token on stdin)" {
  mkdir "$BATS_TEST_TMPDIR/bin"
  local real_curl
  real_curl=$(command -v curl)
  printf '#!/bin/sh\necho "$*" >>"%s"\nexec "%s" "$@"\n' "$BATS_TEST_TMPDIR/argv" "$real_curl" >"$BATS_TEST_TMPDIR/bin/curl"
  chmod +x "$BATS_TEST_TMPDIR/bin/curl"
  PATH="$BATS_TEST_TMPDIR/bin:$PATH" run cvsm_get API_KEY
  [ "$output" = "k-prod" ]
  PATH="$BATS_TEST_TMPDIR/bin:$PATH" run cvsm_get_all
  [ "$status" -eq 0 ]
  [ "$(wc -l <"$BATS_TEST_TMPDIR/argv")" -eq 2 ]
  run grep -e "$TOKEN" -e k-prod "$BATS_TEST_TMPDIR/argv"
  [ "$status" -eq 1 ]
}

# http_date SECONDS_FROM_NOW prints an IMF-fixdate (the HTTP date format).
http_date() {
  LC_ALL=C date -u -d "@$(($(date +%s) + $1))" '+%a, %d %b %Y %H:%M:%S GMT'
}

@test "Retry-After: whole seconds, 0, an HTTP date (seconds until then, rounded up), a past date, or nothing usable" {
  local rc
  check_ra() { # HEADER_VALUE_OR_NONE EXPECTED_REGEX
    stub_reset
    if [ "$1" = none ]; then fault_on_get 429; else fault_on_get 429 "\"retry_after\": \"$1\""; fi
    rc=0
    cvsm_get API_KEY 2>/dev/null || rc=$?
    [ "$rc" -eq 6 ]
    [ "$CVSM_ERROR_KIND" = rate_limited ]
    [ "$CVSM_ERROR_STATUS" = 429 ]
    [[ $CVSM_ERROR_RETRY_AFTER =~ $2 ]] || { echo "Retry-After $1 gave '$CVSM_ERROR_RETRY_AFTER'"; return 1; }
  }
  check_ra 7 '^7$'
  check_ra 0 '^0$'
  check_ra 007 '^7$'
  check_ra "$(http_date 30)" '^(2[0-9]|30)$'
  check_ra "$(http_date -30)" '^0$'
  check_ra "$(LC_ALL=C date -u -d "@$(($(date +%s) + 100))" '+%A, %d-%b-%y %H:%M:%S GMT')" '^(9[0-9]|100)$'
  check_ra "$(LC_ALL=C date -u -d "@$(($(date +%s) + 100))" '+%a %b %e %H:%M:%S %Y')" '^(9[0-9]|100)$'
  check_ra soon '^$'
  check_ra -5 '^$'
  check_ra 1.5 '^$'
  check_ra none '^$'
}

@test "an HTTP-date Retry-After is in the message as seconds too" {
  fault_on_get 429 "\"retry_after\": \"$(http_date 60)\""
  run --separate-stderr cvsm_get API_KEY
  [ "$status" -eq 6 ]
  [[ $stderr =~ ^cvsm:\ HTTP\ 429:\ kesalahan\ buatan\ \(retry\ after\ (5[0-9]|60)s\)$ ]]
}

@test "a failure fills CVSM_ERROR_* in the calling shell, and the next success empties them" {
  local rc=0
  fault_on_get 500
  cvsm_get API_KEY 2>/dev/null || rc=$?
  [ "$rc" -eq 7 ]
  [ "$CVSM_ERROR_KIND" = api ]
  [ "$CVSM_ERROR_MESSAGE" = "HTTP 500: kesalahan buatan" ]
  [ "$CVSM_ERROR_STATUS" = 500 ]
  [ "$CVSM_ERROR_RETRY_AFTER" = "" ]
  [ "$CVSM_ERROR_REQUEST_ID" = req-1 ]
  [ "$CVSM_ERROR_SUGGESTION" = "" ]
  cvsm_get API_KEY >/dev/null
  [ -z "$CVSM_ERROR_KIND$CVSM_ERROR_MESSAGE$CVSM_ERROR_STATUS$CVSM_ERROR_RETRY_AFTER$CVSM_ERROR_REQUEST_ID$CVSM_ERROR_SUGGESTION" ]
  [ -n "${CVSM_ERROR_KIND+x}" ]
}

@test "each exit code has its CVSM_ERROR_KIND" {
  local st rc kind
  for st in 401:3:authentication 403:4:permission_denied 404:5:not_found 429:6:rate_limited 409:7:api; do
    stub_reset
    fault_on_get "${st%%:*}"
    rc=0
    cvsm_get API_KEY 2>/dev/null || rc=$?
    kind=${st##*:}
    st=${st#*:}
    [ "$rc" -eq "${st%%:*}" ]
    [ "$CVSM_ERROR_KIND" = "$kind" ]
  done
  rc=0
  CVSM_TOKEN='' cvsm_get API_KEY 2>/dev/null || rc=$?
  [ "$rc" -eq 2 ]
  [ "$CVSM_ERROR_KIND" = configuration ]
  [ "$CVSM_ERROR_MESSAGE" = "CVSM_TOKEN is not set" ]
  rc=0
  CVSM_BASE_URL=http://127.0.0.1:9/api/v1 CVSM_MAX_RETRIES=0 cvsm_get API_KEY 2>/dev/null || rc=$?
  [ "$rc" -eq 8 ]
  [ "$CVSM_ERROR_KIND" = network ]
  [ "$CVSM_ERROR_STATUS" = "" ]
  [ "$CVSM_ERROR_REQUEST_ID" = "" ]
}

@test "not found carries the by-name answer's status and request id, and the other-case suggestion" {
  local rc=0
  cvsm_get api_key 2>/dev/null || rc=$?
  [ "$rc" -eq 5 ]
  [ "$CVSM_ERROR_SUGGESTION" = API_KEY ]
  [ "$CVSM_ERROR_REQUEST_ID" = req-1 ]
  [ "$CVSM_ERROR_STATUS" = 404 ]
  rc=0
  cvsm_get NOPE 2>/dev/null || rc=$?
  [ "$rc" -eq 5 ]
  [ "$CVSM_ERROR_SUGGESTION" = "" ]
  [ "$CVSM_ERROR_REQUEST_ID" = req-3 ]
  [ "$(count_requests)" -eq 4 ]
}

@test "an answer without X-Request-Id leaves the request id empty" {
  fault_on_get 500 '"no_request_id": true'
  local rc=0
  cvsm_get API_KEY 2>/dev/null || rc=$?
  [ "$rc" -eq 7 ]
  [ "$CVSM_ERROR_REQUEST_ID" = "" ]
}

@test "a retried request reports the request id of the last answer" {
  fault_on_get 503 '' 10
  local rc=0
  cvsm_get API_KEY 2>/dev/null || rc=$?
  [ "$rc" -eq 7 ]
  [ "$CVSM_ERROR_REQUEST_ID" = req-3 ]
}

@test "a redirect is not followed: an API error with its status, and the token goes nowhere else" {
  local code
  for code in 301 302 307 308; do
    stub_reset
    fault_on_get "$code" "\"headers\": {\"Location\": \"$(stub_url)/elsewhere\"}"
    run --separate-stderr cvsm_get API_KEY
    [ "$status" -eq 7 ]
    [[ $stderr == "cvsm: HTTP $code: kesalahan buatan (redirects are not followed; check the base URL)" ]]
    [ "$(count_requests /elsewhere)" -eq 0 ]
    [ "$(count_requests /by-name/API_KEY)" -eq 1 ]
  done
}

@test "a 404 to the listing or export request is a configuration error with its status" {
  local rc=0
  # An unknown team id: the by-name read answers 404, and so does the listing.
  CVSM_TEAM=99999999-0000-0000-0000-000000000000 cvsm_get API_KEY 2>/dev/null || rc=$?
  [ "$rc" -eq 2 ]
  [ "$CVSM_ERROR_KIND" = configuration ]
  [ "$CVSM_ERROR_STATUS" = 404 ]
  [ "$CVSM_ERROR_MESSAGE" = "HTTP 404: tim tidak ditemukan (check the base URL, which ends in /api/v1, and the team)" ]
  rc=0
  CVSM_TEAM=99999999-0000-0000-0000-000000000000 cvsm_get_all 2>/dev/null || rc=$?
  [ "$rc" -eq 2 ]
  [ "$CVSM_ERROR_STATUS" = 404 ]
  # A base URL without /api/v1, and an unknown slug: both requests answer 404.
  rc=0
  CVSM_BASE_URL=$(stub_url) cvsm_get API_KEY 2>/dev/null || rc=$?
  [ "$rc" -eq 2 ]
  [ "$CVSM_ERROR_STATUS" = 404 ]
  [ "$CVSM_ERROR_REQUEST_ID" = req-5 ]
  rc=0
  CVSM_TEAM=unknown-team cvsm_get API_KEY 2>/dev/null || rc=$?
  [ "$rc" -eq 2 ]
  [ "$CVSM_ERROR_MESSAGE" = "HTTP 404: tim tidak ditemukan (check the base URL, which ends in /api/v1, and the team)" ]
  [ "$(count_requests)" -eq 7 ]
  [ "$(count_requests /teams)" -eq 0 ]
}

@test "a 400 to the by-name, listing or export request (a rejected environment) is a configuration error" {
  local rc=0
  stub_fault '[{"path": "/api/v1/teams/acme/secrets", "status": 400, "body": "{\"error\": \"lingkungan tidak valid\"}", "count": 2}]'
  cvsm_get API_KEY 2>/dev/null || rc=$?
  [ "$rc" -eq 2 ]
  [ "$CVSM_ERROR_STATUS" = 400 ]
  [ "$CVSM_ERROR_MESSAGE" = "HTTP 400: lingkungan tidak valid (check the environment)" ]
  rc=0
  cvsm_get_all 2>/dev/null || rc=$?
  [ "$rc" -eq 2 ]
  [ "$CVSM_ERROR_STATUS" = 400 ]
  [ "$(count_requests)" -eq 2 ]
}

@test "after a by-name 404, a 404 or 400 to the listing is a configuration error with the listing's status" {
  local rc code
  for code in 404 400; do
    stub_reset
    stub_fault '[{"path": "/api/v1/teams/acme/secrets/by-name/", "status": 404, "count": 1},
                 {"path": "/api/v1/teams/acme/secrets", "status": '"$code"', "count": 1}]'
    rc=0
    cvsm_get API_KEY 2>/dev/null || rc=$?
    [ "$rc" -eq 2 ]
    [ "$CVSM_ERROR_STATUS" = "$code" ]
    [ "$CVSM_ERROR_REQUEST_ID" = req-2 ]
  done
  # Another failure of the listing is that error (here a 503, retried).
  stub_reset
  stub_fault '[{"path": "/api/v1/teams/acme/secrets/by-name/", "status": 404, "count": 1},
               {"path": "/api/v1/teams/acme/secrets", "status": 503, "count": 3}]'
  rc=0
  cvsm_get API_KEY 2>/dev/null || rc=$?
  [ "$rc" -eq 7 ]
  [ "$(count_requests)" -eq 4 ]
}

@test "a 2xx answer of the wrong shape is retried, then a network error without a status" {
  local spec path body
  for spec in \
    "export|null" "export|[]" 'export|{"A": 1}' 'export|{"A": null}' 'export|"x"' "export|" 'export|{} {}' \
    "list|{}" 'list|{"secrets": {}}' 'list|[]' \
    'value|{"secret": {}}' 'value|{"value": "v"}' 'value|{"secret": {}, "value": 5}' \
    'value|{"secret": "s", "value": "v"}' 'value|[]'; do
    stub_reset
    path=/api/v1/teams/$TEAM_ID/secrets
    case ${spec%%|*} in
      export) path=$path/export ;;
      value) path=$path/by-name/API_KEY ;;
    esac
    body=${spec#*|}
    if [ "${spec%%|*}" = list ]; then
      # The listing is asked only after a 404 to the by-name read.
      stub_fault '[{"path": "/api/v1/teams/'"$TEAM_ID"'/secrets/by-name/", "status": 404, "count": 1}]'
    fi
    stub_fault "$(jq -nc --arg p "$path" --arg b "$body" '[{path: $p, status: 200, body: $b, count: 10}]')"
    rc=0
    if [ "${spec%%|*}" = export ]; then
      CVSM_TEAM=$TEAM_ID cvsm_get_all >/dev/null 2>&1 || rc=$?
    else
      CVSM_TEAM=$TEAM_ID cvsm_get API_KEY >/dev/null 2>&1 || rc=$?
    fi
    [ "$rc" -eq 8 ] || { echo "$spec gave $rc"; return 1; }
    [ "$CVSM_ERROR_KIND" = network ]
    [ "$CVSM_ERROR_STATUS" = "" ]
    [ "$CVSM_ERROR_MESSAGE" = "network error: unreadable response from the server (HTTP 200) (after 3 attempts)" ]
    [ "$(count_requests "$path")" -eq 3 ] || { echo "$spec: $(count_requests "$path") requests"; return 1; }
  done
}

@test "an unreadable answer followed by a good one succeeds" {
  stub_fault '[{"path": "/api/v1/teams/acme/secrets/export", "status": 200, "body": "[]", "count": 1}]'
  run cvsm_get_all --json
  [ "$status" -eq 0 ]
  [ "$(jq -r .API_KEY <<<"$output")" = k-prod ]
  [ "$(count_requests /export)" -eq 2 ]
}

@test "the timeout bounds the whole attempt, a body dripped byte by byte included" {
  fault_on_get 200 '"body": "{\"value\": \"0123456789abcdefghij\"}", "drip": 0.2' 3
  local start=${EPOCHREALTIME/[.,]/}
  CVSM_TIMEOUT=1 CVSM_MAX_RETRIES=1 run --separate-stderr cvsm_get API_KEY
  local took=$(((${EPOCHREALTIME/[.,]/} - start) / 1000))
  [ "$status" -eq 8 ]
  [ "$stderr" = "cvsm: network error: timed out after 1s (after 2 attempts)" ]
  # Two attempts of one second each and a short backoff; the whole body would take 6 s each (the
  # bound leaves room for a loaded machine).
  [ "$took" -lt 6000 ]
  [ "$(count_requests /by-name/API_KEY)" -eq 2 ]
}
