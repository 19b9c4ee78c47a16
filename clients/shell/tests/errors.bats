#!/usr/bin/env bats
# errors.bats - exit codes and messages per HTTP status, retries with jittered backoff, timeouts,
# network errors, and secrecy of the token and the values in messages and command lines.

load helpers

SECRET_PATH="/api/v1/teams/acme/secrets/by-name/API_KEY"

# fault_on_get STATUS [EXTRA_JSON_FIELDS]: the next fetch of API_KEY's value answers STATUS.
fault_on_get() {
  stub_fault "[{\"path\": \"$SECRET_PATH\", \"status\": $1, \"count\": ${3:-1}${2:+, $2}}]"
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

@test "a response that is not HTTP is a network error" {
  stub_fault "[{\"path\": \"$SECRET_PATH\", \"garbage\": true, \"count\": 10}]"
  CVSM_MAX_RETRIES=1 run --separate-stderr cvsm_get API_KEY
  [ "$status" -eq 8 ]
  [ "$(count_requests /by-name/API_KEY)" -eq 2 ]
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

# What a failure puts in CVSM_ERROR_* is every conformance case's (the driver reports them): an
# HTTP-date Retry-After in seconds is retry_after_forms, a retried failure's request id
# retried_error_carries_the_last_request_id.
@test "a failure fills CVSM_ERROR_* in the calling shell, and the next success empties them" {
  fault_on_get 500
  cvsm_get API_KEY 2>/dev/null || true
  [ "$CVSM_ERROR_KIND:$CVSM_ERROR_STATUS:$CVSM_ERROR_REQUEST_ID" = api:500:req-1 ]
  cvsm_get API_KEY >/dev/null
  [ -z "$CVSM_ERROR_KIND$CVSM_ERROR_MESSAGE$CVSM_ERROR_STATUS$CVSM_ERROR_RETRY_AFTER$CVSM_ERROR_REQUEST_ID$CVSM_ERROR_SUGGESTION" ]
  [ -n "${CVSM_ERROR_KIND+x}" ]
}
# Which kind each status is, is every conformance case's (the driver takes the kind from the exit
# code through cvsm.sh's own table, which also sets CVSM_ERROR_KIND); here the codes themselves.
@test "each failure has the exit code the README documents" {
  local st
  for st in 401:3 403:4 404:5 429:6 409:7; do
    fault_on_get "${st%:*}"
    run cvsm_get API_KEY
    [ "$status" -eq "${st#*:}" ]
  done
  CVSM_TOKEN='' run cvsm_get API_KEY
  [ "$status" -eq 2 ]
  CVSM_BASE_URL=http://127.0.0.1:9/api/v1 CVSM_MAX_RETRIES=0 run cvsm_get API_KEY
  [ "$status" -eq 8 ]
}
@test "an answer without X-Request-Id leaves the request id empty" {
  fault_on_get 500 '"no_request_id": true'
  local rc=0
  cvsm_get API_KEY 2>/dev/null || rc=$?
  [ "$rc" -eq 7 ]
  [ "$CVSM_ERROR_REQUEST_ID" = "" ]
}
