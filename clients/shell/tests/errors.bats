#!/usr/bin/env bats
# errors.bats - exit codes and messages per HTTP status, retries with jittered backoff, timeouts,
# network errors, and secrecy of the token and the values in messages and command lines.

load helpers

setup_file() { stub_start; }
teardown_file() { stub_stop; }
setup() { common_setup; }

SECRET_PATH="/api/v1/teams/11111111-2222-3333-4444-555555555555/secrets/s-api"

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

@test "HTTP 404 is not found: exit 5, with the status in the message" {
  fault_on_get 404
  run --separate-stderr cvsm_get API_KEY
  [ "$status" -eq 5 ]
  [ "$stderr" = "cvsm: HTTP 404: kesalahan buatan" ]
}

@test "HTTP 429 is rate limited: exit 6 at once, with the Retry-After seconds in the message" {
  fault_on_get 429 '"retry_after": "7"' 5
  run --separate-stderr cvsm_get API_KEY
  [ "$status" -eq 6 ]
  [ "$stderr" = "cvsm: HTTP 429: kesalahan buatan (retry after 7s)" ]
  [ "$(count_requests /secrets/s-api)" -eq 1 ]
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
  [ "$(count_requests /secrets/s-api)" -eq 1 ]
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
    [ "$(count_requests /secrets/s-api)" -eq 1 ]
  done
}

@test "502, 503 and 504 are retried, and the call succeeds when a retry does" {
  stub_fault "[{\"path\": \"$SECRET_PATH\", \"status\": 503, \"count\": 1},
               {\"path\": \"$SECRET_PATH\", \"status\": 502, \"count\": 1}]"
  run cvsm_get API_KEY
  [ "$status" -eq 0 ]
  [ "$output" = "k-prod" ]
  [ "$(count_requests /secrets/s-api)" -eq 3 ]
}

@test "after max_retries (default 2) more attempts a 503 is an API error" {
  fault_on_get 503 '' 10
  run --separate-stderr cvsm_get API_KEY
  [ "$status" -eq 7 ]
  [ "$stderr" = "cvsm: HTTP 503: kesalahan buatan (after 3 attempts)" ]
  [ "$(count_requests /secrets/s-api)" -eq 3 ]
}

@test "CVSM_MAX_RETRIES sets the number of retries, and 0 turns them off" {
  fault_on_get 504 '' 10
  CVSM_MAX_RETRIES=0 run cvsm_get API_KEY
  [ "$status" -eq 7 ]
  [ "$(count_requests /secrets/s-api)" -eq 1 ]
  CVSM_MAX_RETRIES=3 run cvsm_get API_KEY
  [ "$(count_requests /secrets/s-api)" -eq 5 ]
  run cvsm_get --max-retries 1 API_KEY
  [ "$(count_requests /secrets/s-api)" -eq 7 ]
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
  [ "$(count_requests /secrets/s-api)" -eq 3 ]
}

@test "a connection that keeps dropping is a network error (exit 8) after the retries" {
  stub_fault "[{\"path\": \"$SECRET_PATH\", \"drop\": true, \"count\": 10}]"
  run --separate-stderr cvsm_get API_KEY
  [ "$status" -eq 8 ]
  [[ $stderr == "cvsm: network error: "*" (after 3 attempts)" ]]
  [ "$(count_requests /secrets/s-api)" -eq 3 ]
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
  [ "$(count_requests /secrets/s-api)" -eq 2 ]
}

@test "an unreadable 200 body is a network error after the retries" {
  fault_on_get 200 '"body": "{not json"' 10
  run --separate-stderr cvsm_get API_KEY
  [ "$status" -eq 8 ]
  [ "$stderr" = "cvsm: network error: unreadable response from the server (HTTP 200) (after 3 attempts)" ]
  [ "$(count_requests /secrets/s-api)" -eq 3 ]
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
  stub_fault '[{"path": "/api/v1/teams/'"$TEAM_ID"'/secrets/export", "status": 403, "count": 1}]'
  run cvsm_get_all
  [ "$status" -eq 4 ]
  stub_fault '[{"path": "/api/v1/teams/'"$TEAM_ID"'/secrets/export", "status": 503, "count": 1}]'
  run cvsm_get_all
  [ "$status" -eq 0 ]
}

@test "an error message never contains the token, even when the server echoes it" {
  fault_on_get 400 "\"body\": \"{\\\"error\\\": \\\"bad token $TOKEN\\\"}\""
  run --separate-stderr cvsm_get API_KEY
  [ "$status" -eq 7 ]
  [[ $stderr != *"$TOKEN"* ]]
  [ "$stderr" = "cvsm: HTTP 400: bad token [redacted]" ]
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
  [ "$(wc -l <"$BATS_TEST_TMPDIR/argv")" -eq 4 ]
  run grep -e "$TOKEN" -e k-prod "$BATS_TEST_TMPDIR/argv"
  [ "$status" -eq 1 ]
}
