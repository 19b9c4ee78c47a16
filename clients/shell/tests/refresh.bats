#!/usr/bin/env bats
# refresh.bats - cvsm_refresh (R17) where conformance does not look: the on-disk entry it replaces
# (seen by another process, mode 0600, one copy), the environment argument against --environment,
# the entry kept on a failure and dropped on a 404, and its usage errors.

load helpers

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

# Reading past the cache, the ENVIRONMENT argument not cached, a 404 with its suggestion, and a 503
# retried with no kept value served are the conformance case refresh_reads_past_the_cache.
@test "cvsm_refresh replaces the entry on disk, for other processes too: one file, mode 0600" {
  cvsm_get API_KEY >/dev/null
  rotate API_KEY k-rotated
  [ "$(cvsm_refresh API_KEY)" = k-rotated ]
  run bash -c 'source "$1"; cvsm_get API_KEY' _ "$SDK"
  [ "$output" = k-rotated ]
  [ "$(count_requests)" -eq 1 ]
  if command -v zsh >/dev/null; then
    run zsh -c 'source "$1"; cvsm_refresh API_KEY' _ "$SDK"
    [ "$output" = k-rotated ]
  fi
  local entries=("$CVSM_CACHE_DIR"/values/*)
  [ "${#entries[@]}" -eq 1 ]
  [ "$(stat -c '%a' "${entries[0]}")" = 600 ]
}

@test "the configured environment, as ENVIRONMENT or as the call's --environment, is cached" {
  [ "$(cvsm_refresh --environment development API_KEY)" = k-dev ]
  [ "$(cvsm_get -e development API_KEY)" = k-dev ]
  CVSM_ENVIRONMENT=development cvsm_refresh API_KEY development >/dev/null
  [ "$(CVSM_ENVIRONMENT=development cvsm_get API_KEY)" = k-dev ]
  [ "$(count_requests)" -eq 2 ]
}

@test "a failed cvsm_refresh keeps the cached entry, and a 404 removes it" {
  export CVSM_MAX_RETRIES=0
  cvsm_get API_KEY >/dev/null
  cvsm_get DB >/dev/null
  stub_fault "[{\"path\": \"${BY_NAME}API_KEY\", \"status\": 503}]"
  run cvsm_refresh API_KEY
  [ "$status" -eq 7 ]
  [ "$(cvsm_get API_KEY)" = k-prod ]
  stub_reset '[{"id": "s-db", "name": "db", "environment": "production", "value": "lower"}]'
  run cvsm_refresh DB
  [ "$status" -eq 5 ]
  [ "$(find "$CVSM_CACHE_DIR/values" -type f | wc -l)" -eq 1 ]
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
