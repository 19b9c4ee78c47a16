#!/usr/bin/env bats
# refresh.bats - cvsm_refresh (R17) where conformance does not look: the on-disk entry it replaces
# (seen by another process, mode 0600, one copy), the environment argument against --environment,
# no kept value in place of an error, a 404 dropping the entry, and its usage errors.

load helpers

setup_file() { stub_start; }
teardown_file() { stub_stop; }
setup() { common_setup; }

BY_NAME=/api/v1/teams/acme/secrets/by-name/

# rotate NAME VALUE: the stub's fixture with NAME's production value replaced by VALUE (the
# recorded requests are forgotten; the SDK's cache on disk stays).
rotate() {
  stub_reset "$(jq -nc --arg n "$1" --arg v "$2" '[
    {id: "s-api", name: "API_KEY", environment: "production", value: "k-prod"},
    {id: "s-api-st", name: "API_KEY", environment: "staging", value: "k-staging"},
    {id: "s-db", name: "DB", environment: "production", value: "db-short"}]
    | map(if .name == $n and .environment == "production" then .value = $v else . end)')"
}

@test "cvsm_refresh reads past a fresh entry and replaces it on disk, for other processes too" {
  [ "$(cvsm_get API_KEY)" = k-prod ]
  rotate API_KEY k-rotated
  [ "$(cvsm_get API_KEY)" = k-prod ]
  [ "$(count_requests)" -eq 0 ]
  cvsm_refresh API_KEY >"$BATS_TEST_TMPDIR/out"
  [ "$(od -An -c "$BATS_TEST_TMPDIR/out" | tr -d ' \n')" = k-rotated ]
  [ "$(count_requests "${BY_NAME}API_KEY")" -eq 1 ]
  [ "$(stub_requests | jq -r '.[0].query')" = environment=production ]
  [ "$(cvsm_get API_KEY)" = k-rotated ]
  run bash -c 'source "$1"; cvsm_get API_KEY' _ "$SDK"
  [ "$output" = k-rotated ]
  if command -v zsh >/dev/null; then
    run zsh -c 'source "$1"; cvsm_refresh API_KEY' _ "$SDK"
    [ "$output" = k-rotated ]
    [ "$(count_requests)" -eq 2 ]
  fi
  local entries=("$CVSM_CACHE_DIR"/values/*)
  [ "${#entries[@]}" -eq 1 ]
  [ "$(stat -c '%a' "${entries[0]}")" = 600 ]
}

@test "cvsm_refresh NAME ENVIRONMENT reads that environment and caches nothing; --environment is the call's own" {
  cvsm_get API_KEY >/dev/null
  run cvsm_refresh API_KEY staging
  [ "$status" -eq 0 ]
  [ "$output" = k-staging ]
  [ "$(stub_requests | jq -r '.[1].query')" = environment=staging ]
  [ "$(cvsm_get API_KEY)" = k-prod ]
  cvsm_get -e staging API_KEY >/dev/null
  [ "$(count_requests)" -eq 3 ]
  # The configured environment named as ENVIRONMENT, or an --environment of the call, is cached.
  stub_reset
  [ "$(cvsm_refresh --environment development API_KEY)" = k-dev ]
  [ "$(cvsm_get -e development API_KEY)" = k-dev ]
  CVSM_ENVIRONMENT=development cvsm_refresh API_KEY development >/dev/null
  [ "$(CVSM_ENVIRONMENT=development cvsm_get API_KEY)" = k-dev ]
  [ "$(count_requests)" -eq 2 ]
}

@test "cvsm_refresh serves no kept value: a 503 fails and the cached entry stays" {
  export CVSM_STALE_IF_ERROR=60 CVSM_MAX_RETRIES=1
  cvsm_get API_KEY >/dev/null
  stub_fault "[{\"path\": \"$BY_NAME\", \"count\": 99, \"status\": 503}]"
  local rc=0
  cvsm_refresh API_KEY >"$BATS_TEST_TMPDIR/out" 2>"$BATS_TEST_TMPDIR/err" || rc=$?
  [ "$rc" -eq 7 ]
  [ ! -s "$BATS_TEST_TMPDIR/out" ]
  [ -z "$CVSM_STALE" ]
  [ "$CVSM_ERROR_KIND" = api ]
  [ "$CVSM_ERROR_STATUS" = 503 ]
  [ "$(wc -l <"$BATS_TEST_TMPDIR/err")" -eq 1 ]
  [ "$(count_requests "${BY_NAME}API_KEY")" -eq 3 ]
  [ "$(cvsm_get API_KEY)" = k-prod ]
  [ "$(count_requests)" -eq 3 ]
}

@test "a 404 to cvsm_refresh removes the cached entry and is not found, with the suggestion" {
  cvsm_get DB >/dev/null
  stub_reset '[{"id": "s-db", "name": "db", "environment": "production", "value": "lower"}]'
  run cvsm_refresh DB
  [ "$status" -eq 5 ]
  [ "$output" = 'cvsm: secret "DB" not found in production; did you mean "db"?' ]
  [ -z "$(ls -A "$CVSM_CACHE_DIR/values")" ]
  run cvsm_get DB
  [ "$status" -eq 5 ]
}

@test "cvsm_refresh usage: NAME and at most an ENVIRONMENT, neither empty; a bad name asks nothing" {
  run cvsm_refresh
  [ "$status" -eq 2 ]
  [ "$output" = "cvsm: usage: cvsm_refresh [OPTIONS] NAME [ENVIRONMENT]" ]
  run cvsm_refresh API_KEY staging extra
  [ "$status" -eq 2 ]
  run cvsm_refresh API_KEY ''
  [ "$status" -eq 2 ]
  [[ "$output" == *"ENVIRONMENT must not be empty"* ]]
  run cvsm_refresh API_KEY 'a b'
  [ "$status" -eq 2 ]
  run cvsm_refresh --json API_KEY
  [ "$status" -eq 2 ]
  run cvsm_refresh 'BAD-NAME'
  [ "$status" -eq 5 ]
  [ "$(count_requests)" -eq 0 ]
  run cvsm_refresh -- -e
  [ "$status" -eq 5 ]
  [ "$(count_requests)" -eq 0 ]
}
