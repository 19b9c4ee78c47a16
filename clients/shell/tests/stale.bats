#!/usr/bin/env bats
# stale.bats - stale-if-error (R14): a value kept stale_if_error seconds past its TTL is served,
# marked (CVSM_STALE=1, one warning line), when a refresh fails with a network error, a 5xx or a
# 429; never after a 401/403 (which empty the cache) or another error; bounded; forgotten by
# cvsm_clear_cache; and kept only in the cache directory.

load helpers

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

@test "in a command substitution the value comes through and the warning still goes to stderr" {
  cvsm_get API_KEY >/dev/null
  sleep 1.1
  fail_all '"drop": true'
  local v
  v=$(cvsm_get API_KEY 2>"$BATS_TEST_TMPDIR/err")
  [ "$v" = k-prod ]
  [[ "$(cat "$BATS_TEST_TMPDIR/err")" == "cvsm: warning: serving a stale value of API_KEY, "*"(network error: "* ]]
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
