#!/usr/bin/env bats
# get.bats - cvsm_get: the one request it sends (the listing only after a 404), exact output, name
# matching, and the team in the path.

load helpers

setup_file() { stub_start; }
teardown_file() { stub_stop; }
setup() { common_setup; }

@test "cvsm_get prints the value exactly, adding no newline" {
  cvsm_get API_KEY >"$BATS_TEST_TMPDIR/out"
  [ "$(od -An -c "$BATS_TEST_TMPDIR/out" | tr -d ' \n')" = "k-prod" ]
}

@test "cvsm_get keeps quotes, backslashes, dollar signs and unicode as they are" {
  run cvsm_get QUOTE
  [ "$status" -eq 0 ]
  [ "$output" = "it's \"q\" \$(touch PWNED) \`id\` \\ \$HOME" ]
  [ ! -e PWNED ]
  run cvsm_get UNICODE
  [ "$output" = "héllo wörld ✓" ]
}

@test "a token with quotes and backslashes (visible ASCII) is sent exactly" {
  local tok='cvsm_a"b\c'\''d'
  CVSM_TOKEN=$tok run cvsm_get API_KEY
  [ "$status" -eq 3 ]
  [ "$(stub_requests | jq -r '.[0].headers.authorization')" = "Bearer $tok" ]
}

@test "environments are percent-encoded in the query" {
  run cvsm_get --environment 'A&B=C+D' API_KEY
  [ "$status" -eq 5 ]
  [ "$(stub_requests | jq -r '.[1].query')" = "environment=A%26B%3DC%2BD&search=API_KEY" ]
}

@test "a trailing slash on the base URL is ignored" {
  export CVSM_BASE_URL="$CVSM_BASE_URL/"
  cvsm_get API_KEY >/dev/null
  [ "$(stub_requests | jq '[.[] | select(.path | contains("//"))] | length')" -eq 0 ]
}
