#!/usr/bin/env bats
# stale.bats - stale-if-error (R14): a value kept stale_if_error seconds past its TTL is served,
# marked (CVSM_STALE=1, one warning line), when a refresh fails with a network error, a 5xx or a
# 429; never after a 401/403 (which empty the cache) or another error; bounded; forgotten by
# cvsm_clear_cache; and kept only in the cache directory.

load helpers

setup_file() { stub_start; }
teardown_file() { stub_stop; }
setup() {
  common_setup
  export CVSM_CACHE_TTL=1 CVSM_STALE_IF_ERROR=30 CVSM_MAX_RETRIES=0
}

SECRETS=/api/v1/teams/acme/secrets/

# fail_all FIELDS: every following request for a secret fails (FIELDS: stub fault fields).
fail_all() {
  stub_fault "[{\"path\": \"$SECRETS\", \"count\": 99, $1}]"
}

# get_here NAME: runs cvsm_get NAME in this shell (so CVSM_* variables are visible), its stdout in
# $BATS_TEST_TMPDIR/out, its stderr in $BATS_TEST_TMPDIR/err and its status in $rc.
get_here() {
  rc=0
  cvsm_get "$@" >"$BATS_TEST_TMPDIR/out" 2>"$BATS_TEST_TMPDIR/err" || rc=$?
}

@test "after the TTL, a 503 is answered with the kept value, marked stale, with one warning line" {
  cvsm_get API_KEY >/dev/null
  [ -z "$CVSM_STALE" ]
  sleep 1.2
  fail_all '"status": 503'
  get_here API_KEY
  [ "$rc" -eq 0 ]
  [ "$(cat "$BATS_TEST_TMPDIR/out")" = k-prod ]
  [ "$CVSM_STALE" = 1 ]
  [ -z "$CVSM_ERROR_KIND" ]
  [ "$(wc -l <"$BATS_TEST_TMPDIR/err")" -eq 1 ]
  [[ "$(cat "$BATS_TEST_TMPDIR/err")" =~ ^cvsm:\ warning:\ serving\ a\ stale\ value\ of\ API_KEY,\ fetched\ [0-9]+s\ ago,\ because\ refreshing\ it\ failed\ \(api\ error:\ HTTP\ 503:\ kesalahan\ buatan\)$ ]]
  [ "$(count_requests /by-name/API_KEY)" -eq 2 ]
}

@test "a network error, a 5xx, a 429 or an unreadable answer (after retries) serves the kept value" {
  local fault kind
  for fault in '"drop": true|network' '"garbage": true|network' '"status": 502|api' '"status": 500|api' \
    '"status": 429, "retry_after": "5"|rate_limited' '"status": 200, "body": "<html>maintenance</html>"|network'; do
    stub_reset
    cvsm_clear_cache
    cvsm_get API_KEY >/dev/null
    sleep 1.1
    fail_all "${fault%|*}"
    kind=${fault##*|}
    CVSM_MAX_RETRIES=1 get_here API_KEY
    [ "$rc" -eq 0 ] || { echo "$fault: $rc"; return 1; }
    [ "$(cat "$BATS_TEST_TMPDIR/out")" = k-prod ]
    [ "$CVSM_STALE" = 1 ]
    [[ "$(cat "$BATS_TEST_TMPDIR/err")" == *"($kind error: "* ]] || { cat "$BATS_TEST_TMPDIR/err"; return 1; }
  done
}

@test "a fresh read is not marked stale, and clears the mark of an earlier call" {
  cvsm_get API_KEY >/dev/null
  sleep 1.1
  fail_all '"status": 503'
  get_here API_KEY
  [ "$CVSM_STALE" = 1 ]
  stub_reset
  get_here API_KEY
  [ "$rc" -eq 0 ]
  [ -z "$CVSM_STALE" ]
  [ ! -s "$BATS_TEST_TMPDIR/err" ]
}

@test "cvsm_get_all and cvsm_inject serve a kept get_all result, and cvsm_get a name from it" {
  cvsm_get_all >/dev/null
  sleep 1.1
  fail_all '"status": 503'
  local rc=0
  cvsm_get_all --json >"$BATS_TEST_TMPDIR/out" 2>"$BATS_TEST_TMPDIR/err" || rc=$?
  [ "$rc" -eq 0 ]
  [ "$(jq -r .DB "$BATS_TEST_TMPDIR/out")" = db-short ]
  [ "$CVSM_STALE" = 1 ]
  [[ "$(cat "$BATS_TEST_TMPDIR/err")" == "cvsm: warning: serving a stale value of every secret of production, fetched "*"s ago, because refreshing it failed (api error: HTTP 503: kesalahan buatan)" ]]
  get_here DB_URL
  [ "$(cat "$BATS_TEST_TMPDIR/out")" = "postgres://u:p@h/db" ]
  [ "$CVSM_STALE" = 1 ]
  (
    cvsm_inject 2>"$BATS_TEST_TMPDIR/err"
    [ "$CVSM_STALE" = 1 ]
    [ "$DB" = db-short ]
  )
  [ "$(wc -l <"$BATS_TEST_TMPDIR/err")" -eq 1 ]
  run grep -q -e k-prod -e db-short "$BATS_TEST_TMPDIR/err"
  [ "$status" -eq 1 ]
}

@test "in a command substitution the value comes through and the warning still goes to stderr" {
  cvsm_get API_KEY >/dev/null
  sleep 1.1
  fail_all '"drop": true'
  local v
  v=$(cvsm_get API_KEY 2>"$BATS_TEST_TMPDIR/err")
  [ "$v" = k-prod ]
  [[ "$(cat "$BATS_TEST_TMPDIR/err")" == "cvsm: warning: serving a stale value of API_KEY, "*"(network error: "* ]]
}

@test "a value older than cache_ttl + stale_if_error is not served, and is gone from disk" {
  export CVSM_STALE_IF_ERROR=1
  cvsm_get API_KEY >/dev/null
  sleep 1.2
  fail_all '"status": 503'
  get_here API_KEY
  [ "$rc" -eq 0 ]
  [ "$CVSM_STALE" = 1 ]
  sleep 1
  get_here API_KEY
  [ "$rc" -eq 7 ]
  [ -z "$CVSM_STALE" ]
  [ "$CVSM_ERROR_STATUS" = 503 ]
  [ "$(cat "$BATS_TEST_TMPDIR/err")" = "cvsm: HTTP 503: kesalahan buatan" ]
  [ -z "$(find "$CVSM_CACHE_DIR/values" -type f)" ]
}

@test "off by default: without CVSM_STALE_IF_ERROR a failed refresh is the error" {
  unset CVSM_STALE_IF_ERROR
  cvsm_get API_KEY >/dev/null
  sleep 1.1
  fail_all '"status": 503'
  get_here API_KEY
  [ "$rc" -eq 7 ]
  [ -z "$CVSM_STALE" ]
  [ "$(cat "$BATS_TEST_TMPDIR/err")" = "cvsm: HTTP 503: kesalahan buatan" ]
}

@test "a kept value another call wrote with stale-if-error is not served by a call without it" {
  cvsm_get API_KEY >/dev/null
  sleep 1.1
  fail_all '"status": 503'
  CVSM_STALE_IF_ERROR=0 get_here API_KEY
  [ "$rc" -eq 7 ]
  get_here --stale-if-error 0 API_KEY
  [ "$rc" -eq 7 ]
  get_here API_KEY
  [ "$rc" -eq 0 ]
}

@test "a 401 or 403 is never answered with a kept value: it empties the cache" {
  local code
  for code in 401:3 403:4; do
    stub_reset
    cvsm_get API_KEY >/dev/null
    cvsm_get_all >/dev/null
    sleep 1.1
    stub_fault '[{"path": "'"$SECRETS"'", "status": '"${code%:*}"', "count": 1}]'
    get_here API_KEY
    [ "$rc" -eq "${code#*:}" ]
    [ -z "$CVSM_STALE" ]
    [ -z "$(find "$CVSM_CACHE_DIR/values" -type f 2>/dev/null)" ]
    fail_all '"status": 503'
    get_here API_KEY
    [ "$rc" -eq 7 ]
  done
}

@test "a 404, 400, 409 or redirect is never answered with a kept value" {
  local fault
  for fault in '"status": 404|5' '"status": 400|2' '"status": 409|7' '"status": 302, "headers": {"Location": "/x"}|7'; do
    stub_reset
    cvsm_get API_KEY >/dev/null
    sleep 1.1
    stub_fault "[{\"path\": \"${SECRETS}by-name/\", \"count\": 1, ${fault%|*}}]"
    get_here API_KEY
    [ "$rc" -eq "${fault##*|}" ] || { echo "$fault: $rc"; return 1; }
    [ -z "$CVSM_STALE" ]
    [ ! -s "$BATS_TEST_TMPDIR/out" ]
  done
}

@test "after a by-name 404 the value is forgotten, and a failed listing serves nothing kept" {
  cvsm_get API_KEY >/dev/null
  sleep 1.1
  stub_fault '[{"path": "'"$SECRETS"'by-name/", "status": 404, "count": 1},
               {"path": "/api/v1/teams/acme/secrets", "status": 503, "count": 1}]'
  get_here API_KEY
  [ "$rc" -eq 7 ]
  [ -z "$CVSM_STALE" ]
  [ "$(cat "$BATS_TEST_TMPDIR/err")" = "cvsm: HTTP 503: kesalahan buatan" ]
  fail_all '"status": 503'
  get_here API_KEY
  [ "$rc" -eq 7 ]
}

@test "cvsm_clear_cache forgets kept values" {
  cvsm_get API_KEY >/dev/null
  cvsm_get_all >/dev/null
  sleep 1.1
  cvsm_clear_cache
  fail_all '"status": 503'
  get_here API_KEY
  [ "$rc" -eq 7 ]
  local rc2=0
  cvsm_get_all >/dev/null 2>&1 || rc2=$?
  [ "$rc2" -eq 7 ]
}

@test "with CVSM_CACHE_TTL=0 every call asks the server, and a failed one serves the last value" {
  export CVSM_CACHE_TTL=0
  cvsm_get API_KEY >/dev/null
  cvsm_get API_KEY >/dev/null
  [ "$(count_requests)" -eq 2 ]
  fail_all '"status": 503'
  get_here API_KEY
  [ "$rc" -eq 0 ]
  [ "$(cat "$BATS_TEST_TMPDIR/out")" = k-prod ]
  [ "$CVSM_STALE" = 1 ]
  [ "$(count_requests)" -eq 3 ]
}

@test "kept values live only in the cache directory, one file per entry, never holding the token" {
  cvsm_get API_KEY >/dev/null
  cvsm_get_all >/dev/null
  sleep 1.1
  fail_all '"status": 503'
  get_here API_KEY
  cvsm_get_all >/dev/null 2>&1
  [ "$(find "$CVSM_CACHE_DIR" -type f | wc -l)" -eq 2 ]
  run grep -r -q -- "$TOKEN" "$CVSM_CACHE_DIR"
  [ "$status" -eq 1 ]
}

@test "without a cache directory nothing is kept, so a failed call is the error" {
  unset CVSM_CACHE_DIR XDG_RUNTIME_DIR
  export TMPDIR=$BATS_TEST_TMPDIR/tmp
  mkdir "$TMPDIR"
  cvsm_get API_KEY >/dev/null
  fail_all '"status": 503'
  get_here API_KEY
  [ "$rc" -eq 7 ]
  [ -z "$(ls -A "$TMPDIR")" ]
}
