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

@test "every request carries the bearer token, Accept: application/json and the cvsm-shell user agent" {
  cvsm_get API_KEY >/dev/null
  cvsm_get_all >/dev/null
  run stub_requests
  [ "$(jq 'length' <<<"$output")" -eq 2 ]
  [ "$(jq --arg t "Bearer $TOKEN" '[.[] | select(.headers.authorization == $t)] | length' <<<"$output")" -eq 2 ]
  [ "$(jq '[.[] | select(.headers.accept == "application/json")] | length' <<<"$output")" -eq 2 ]
  [ "$(jq --arg ua "cvsm-shell/$(cvsm_version)" '[.[] | select(.headers["user-agent"] == $ua)] | length' <<<"$output")" -eq 2 ]
  [ "$(cvsm_version)" = 0.1.0 ]
}

@test "whitespace around the token (a token read from a file) is trimmed" {
  local tok
  for tok in "$TOKEN"$'\n' $'  \t'"$TOKEN"$'\r\n' $'\n'"$TOKEN"' '; do
    stub_reset
    CVSM_TOKEN=$tok CVSM_CACHE_TTL=0 CVSM_TEAM=$TEAM_ID run cvsm_get API_KEY
    [ "$status" -eq 0 ]
    [ "$output" = k-prod ]
    [ "$(stub_requests | jq -r '.[0].headers.authorization')" = "Bearer $TOKEN" ]
  done
}

@test "a token with quotes and backslashes (visible ASCII) is sent exactly" {
  local tok='cvsm_a"b\c'\''d'
  CVSM_TOKEN=$tok run cvsm_get API_KEY
  [ "$status" -eq 3 ]
  [ "$(stub_requests | jq -r '.[0].headers.authorization')" = "Bearer $tok" ]
}

@test "a name that is not a valid secret name is not found, without a request" {
  local name long
  long=$(printf 'A%.0s' $(seq 1 256))
  for name in '' 1A a-b 'A B' 'é' "A;B" $'A\n' "$long"; do
    run --separate-stderr cvsm_get "$name"
    [ "$status" -eq 5 ]
    [[ $stderr == 'cvsm: "'*'" is not a valid secret name (letters, digits and _, not starting with a digit, at most 255 characters)' ]]
    [ "${#lines[@]}" -eq 0 ]
  done
  [ "$(count_requests)" -eq 0 ]
  local rc=0
  cvsm_get -- '' 2>/dev/null || rc=$?
  [ "$rc" -eq 5 ]
  [ "$CVSM_ERROR_KIND" = not_found ]
  [ "$CVSM_ERROR_STATUS" = "" ]
  [ "$CVSM_ERROR_REQUEST_ID" = "" ]
  run cvsm_get "${long:1}"
  [ "$status" -eq 5 ]
  [ "$(count_requests)" -eq 2 ]
  run cvsm_get _
  [ "$(count_requests)" -eq 4 ]
}

@test "cvsm_get makes one request: GET .../teams/TEAM/secrets/by-name/NAME?environment=ENV" {
  cvsm_get API_KEY >/dev/null
  run stub_requests
  [ "$(jq -c '[.[] | [.path, .query]]' <<<"$output")" = '[["/api/v1/teams/acme/secrets/by-name/API_KEY","environment=production"]]' ]
}

@test "a by-name answer of another shape is unreadable: a network error" {
  stub_fault '[{"path": "/api/v1/teams/acme/secrets/by-name/API_KEY", "status": 200, "body": "{\"value\": \"v\"}", "count": 3}]'
  run --separate-stderr cvsm_get API_KEY
  [ "$status" -eq 8 ]
  [ "$output" = "" ]
}

@test "cvsm_get reads the exact name only" {
  run cvsm_get DB
  [ "$status" -eq 0 ]
  [ "$output" = "db-short" ]
  [ "$(count_requests /by-name/DB)" -eq 1 ]
  [ "$(count_requests /by-name/DB_URL)" -eq 0 ]
}

@test "a name that differs only in case is not found, and the message suggests the existing name" {
  run --separate-stderr cvsm_get api_key
  [ "$status" -eq 5 ]
  [ "$output" = "" ]
  [ "$stderr" = 'cvsm: secret "api_key" not found in production; did you mean "API_KEY"?' ]
}

@test "an absent name is not found (exit 5) without a suggestion" {
  run --separate-stderr cvsm_get NOPE
  [ "$status" -eq 5 ]
  [ "$stderr" = 'cvsm: secret "NOPE" not found in production' ]
  [ "$(count_requests)" -eq 2 ]
}

@test "CVSM_ENVIRONMENT selects the environment, production being the default" {
  run cvsm_get API_KEY
  [ "$output" = "k-prod" ]
  CVSM_ENVIRONMENT=development run cvsm_get API_KEY
  [ "$output" = "k-dev" ]
  [ "$(stub_requests | jq -r '[.[] | select(.query | startswith("environment=development"))] | length')" -eq 1 ]
}

@test "the --environment option wins over CVSM_ENVIRONMENT" {
  export CVSM_ENVIRONMENT=development
  run cvsm_get --environment staging API_KEY
  [ "$output" = "k-staging" ]
  run cvsm_get API_KEY --environment=production
  [ "$output" = "k-prod" ]
}

@test "a team slug or id goes into the path as it is, percent-encoded, and nothing asks /teams" {
  cvsm_get API_KEY >/dev/null
  CVSM_TEAM=$TEAM_ID cvsm_get DB >/dev/null
  CVSM_TEAM='a/c%me' run cvsm_get DB_URL
  [ "$(stub_requests | jq -r '.[].path')" = "/api/v1/teams/acme/secrets/by-name/API_KEY
/api/v1/teams/$TEAM_ID/secrets/by-name/DB
/api/v1/teams/a%2Fc%25me/secrets/by-name/DB_URL
/api/v1/teams/a%2Fc%25me/secrets" ]
  [ "$(count_requests /teams)" -eq 0 ]
}

@test "a team slug that matches none of the caller's teams is a configuration error (the listing answers 404)" {
  CVSM_TEAM=unknown-team run --separate-stderr cvsm_get API_KEY
  [ "$status" -eq 2 ]
  [ "$stderr" = 'cvsm: HTTP 404: tim tidak ditemukan (check the base URL, which ends in /api/v1, and the team)' ]
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
