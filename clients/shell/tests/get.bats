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

@test "cvsm_get keeps a multi-line value byte for byte, trailing newlines included" {
  cvsm_get MULTI >"$BATS_TEST_TMPDIR/out"
  printf 'line1\nline2\n\n' >"$BATS_TEST_TMPDIR/want"
  cmp "$BATS_TEST_TMPDIR/want" "$BATS_TEST_TMPDIR/out"
}

@test "cvsm_get prints nothing and succeeds for an empty value" {
  cvsm_get EMPTY >"$BATS_TEST_TMPDIR/out"
  [ ! -s "$BATS_TEST_TMPDIR/out" ]
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

@test "the --environment option wins over CVSM_ENVIRONMENT" {
  export CVSM_ENVIRONMENT=development
  run cvsm_get --environment staging API_KEY
  [ "$output" = "k-staging" ]
  run cvsm_get API_KEY --environment=production
  [ "$output" = "k-prod" ]
}

@test "the --team option wins over CVSM_TEAM" {
  export CVSM_TEAM=nobody
  run cvsm_get --team acme API_KEY
  [ "$output" = "k-prod" ]
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

@test "a 65,536-byte value of two-byte characters, and CR and tab characters, come back byte for byte" {
  local big
  big=$(python3 -c 'print("é" * 32768, end="")')
  stub_reset "$(jq -nc --arg big "$big" '[{id: "b", name: "BIG", environment: "production", value: $big},
    {id: "c", name: "CTRL", environment: "production", value: "a\r\nb\tc\n"}]')"
  cvsm_get BIG >"$BATS_TEST_TMPDIR/out"
  [ "$(wc -c <"$BATS_TEST_TMPDIR/out")" -eq 65536 ]
  printf '%s' "$big" | cmp - "$BATS_TEST_TMPDIR/out"
  cvsm_get BIG >"$BATS_TEST_TMPDIR/out"
  printf '%s' "$big" | cmp - "$BATS_TEST_TMPDIR/out"
  cvsm_get CTRL | cmp - <(printf 'a\r\nb\tc\n')
  cvsm_get_all >"$BATS_TEST_TMPDIR/vars"
  # shellcheck disable=SC1091
  . "$BATS_TEST_TMPDIR/vars"
  [ "$BIG" = "$big" ]
  [ "$CTRL" = $'a\r\nb\tc\n' ]
}
