#!/usr/bin/env bats
# e2e.bats - an end-to-end team: a token with its key part reads through the cvsm command (built
# from clients/go for this file), which opens the values; the stub serves the shared vectors
# (conformance/vectors/e2e.json) as an end-to-end team. Skipped when go is not installed.

load helpers

VECTORS="$BATS_TEST_DIRNAME/../../../conformance/vectors/e2e.json"

setup_file() {
  stub_start
  if command -v go >/dev/null; then
    (cd "$BATS_TEST_DIRNAME/../../go" &&
      CGO_ENABLED=0 go build -buildvcs=false -o "$BATS_FILE_TMPDIR/bin/cvsm" ./cmd/cvsm)
    # Whether that cvsm reads a token of format 2 (with its pin): one that does not refuses it as a
    # configuration error (exit 2) before any request; one that does fails to connect (exit 8).
    local rc=0
    jq -j .token.token "$VECTORS" | CVSM_BASE_URL=http://127.0.0.1:9/api/v1 "$BATS_FILE_TMPDIR/bin/cvsm" \
      get X --error-json --token-file /dev/stdin --team acme --timeout 1 --max-retries 0 >/dev/null 2>&1 || rc=$?
    [ "$rc" = 2 ] || touch "$BATS_FILE_TMPDIR/format2"
  fi
}

# need_format2: skips a test that reads through cvsm when the cvsm built from clients/go does not
# read a pinned token yet (its port of issue 37).
need_format2() {
  [ -e "$BATS_FILE_TMPDIR/format2" ] || skip "the cvsm command of clients/go does not read format-2 tokens yet (issue 37)"
}
teardown_file() { stub_stop; }

# e2e_reset INDEXES [KEY_ANSWER]: the stub serves the vectors' values of INDEXES (a jq list such as
# 0,2,3: their envelopes, opening or not) as the secrets of an end-to-end team "acme", its token the
# vectors'. Its key answer (GET .../e2e/key) is KEY_ANSWER (a jq expression on the vectors), else
# the token's wrap of the current version (2) with the link of version 2 to the pinned version 1.
e2e_reset() {
  local answer='{team_id, key_version, wrapped_key: (.recipients[] | select(.what == "token") | .wrapped_key),
    links: [.chain.links[] | select(.key_version <= 2) | {key_version, link}]}'
  [ -z "${2:-}" ] || answer=$2
  jq -c --arg team "$TEAM_ID" "{token: .token.api_token,
      teams: [{id: \$team, slug: \"acme\", name: \"Acme\", plan: \"starter\"}],
      e2e: ($answer),
      secrets: [.values[$1] | {id: \"s-\\(.name)-\\(.environment)\", name, environment, value: .envelope}]}" \
    "$VECTORS" | stub_curl -X POST --data-binary @- "$(stub_url)/_stub/reset" >/dev/null
}

# vector PATH: a field of the vectors file (jq path), raw.
vector() { jq -j "$1" "$VECTORS"; }

setup() {
  [ -x "$BATS_FILE_TMPDIR/bin/cvsm" ] || skip "go is not installed: the cvsm command cannot be built"
  e2e_reset 0,2,3
  sdk_env
  CVSM_TOKEN=$(vector .token.token)
  API_TOKEN=$(vector .token.api_token)
  KEY_PART=$(vector .token.private_key)
  PATH="$BATS_FILE_TMPDIR/bin:$PATH"
  # shellcheck disable=SC1090,SC1091 # cvsm.sh is linted on its own
  source "$SDK"
}

@test "the team key is kept in the cache directory: a later read is one request, until cvsm_clear_cache" {
  need_format2
  cvsm_get DATABASE_URL >/dev/null
  [ "$(cvsm_get -e staging API_KEY)" = "$(vector '.values[2].value')" ]
  [ "$(count_requests)" -eq 3 ]
  [ "$(count_requests /e2e/key)" -eq 1 ]
  # The key's entry lives in the values' directory, private, and goes with them.
  [ "$(find "$CVSM_CACHE_DIR" -type f ! -perm 600 | wc -l)" -eq 0 ]
  cvsm_clear_cache
  cvsm_get DATABASE_URL >/dev/null
  [ "$(count_requests /e2e/key)" -eq 2 ]
  # Without a cache (CVSM_CACHE_TTL=0) nothing is written, the key neither: each call fetches it.
  rm -rf "$CVSM_CACHE_DIR"
  CVSM_CACHE_TTL=0 cvsm_get DATABASE_URL >/dev/null
  CVSM_CACHE_TTL=0 cvsm_get DATABASE_URL >/dev/null
  [ "$(count_requests /e2e/key)" -eq 4 ]
  [ ! -e "$CVSM_CACHE_DIR/values" ] || [ -z "$(ls -A "$CVSM_CACHE_DIR/values")" ]
}

@test "cvsm_refresh reads through cvsm past the cache, another environment too, with the kept team key" {
  need_format2
  cvsm_get DATABASE_URL >/dev/null
  [ "$(cvsm_refresh DATABASE_URL)" = "$(vector '.values[0].value')" ]
  [ "$(count_requests /by-name/DATABASE_URL)" -eq 2 ]
  [ "$(cvsm_refresh API_KEY staging)" = "$(vector '.values[2].value')" ]
  [ "$(stub_requests | jq -r '.[-1].query')" = environment=staging ]
  cvsm_get DATABASE_URL >/dev/null
  [ "$(count_requests /e2e/key)" -eq 1 ]
  [ "$(count_requests)" -eq 4 ]
}

@test "cvsm_get keeps an opened value's trailing newlines" {
  need_format2
  e2e_reset 1
  cvsm_get DATABASE_URL >"$BATS_TEST_TMPDIR/out"
  printf 'line one\nline two\n' >"$BATS_TEST_TMPDIR/want"
  cmp "$BATS_TEST_TMPDIR/want" "$BATS_TEST_TMPDIR/out"
}

@test "cvsm_get_all, cvsm_inject and cvsm_run give the opened values, quotes and unicode as they are" {
  need_format2
  eval "$(cvsm_get_all -e development)"
  [ "$QUOTED" = "$(vector '.values[3].value')" ]
  [ "$(cvsm_get_all -e staging --json)" = "$(jq -c '{API_KEY: .values[2].value}' "$VECTORS")" ]
  unset API_KEY
  cvsm_inject -e staging
  [ "$API_KEY" = "$(vector '.values[2].value')" ]
  [ "$(cvsm_run -e development --overwrite -- printenv QUOTED)" = "$(vector '.values[3].value')" ]
  run stub_requests
  [[ $output != *"$KEY_PART"* ]]
}

@test "a name that is absent is not found, with the by-name read's status, request id and a suggestion" {
  need_format2
  local rc=0
  cvsm_get database_url 2>/dev/null || rc=$?
  [ "$rc" -eq 5 ]
  [ "$CVSM_ERROR_KIND" = not_found ]
  [ "$CVSM_ERROR_STATUS" = 404 ]
  [ "$CVSM_ERROR_REQUEST_ID" = req-1 ]
  [ "$CVSM_ERROR_SUGGESTION" = DATABASE_URL ]
}

@test "without the cvsm command, a token with a key part is a configuration error saying how to get it" {
  PATH=/usr/local/bin:/usr/bin:/bin
  run cvsm_get DATABASE_URL
  [ "$status" -eq 2 ]
  [[ $output == *"cvsm command"*"make -C clients/go build"* ]]
  [ "$(count_requests)" -eq 0 ]
}

@test "the cvsm command beside cvsm.sh is used when none is on PATH" {
  need_format2
  mkdir "$BATS_TEST_TMPDIR/sdk"
  cp "$SDK" "$BATS_FILE_TMPDIR/bin/cvsm" "$BATS_TEST_TMPDIR/sdk/"
  PATH=/usr/local/bin:/usr/bin:/bin
  run bash -c 'cd /; source "$1" && cvsm_get DATABASE_URL' _ "$BATS_TEST_TMPDIR/sdk/cvsm.sh"
  [ "$status" -eq 0 ]
  [ "$output" = "$(vector '.values[0].value')" ]
}

@test "zsh: a token with a key part reads through cvsm too" {
  need_format2
  need_zsh
  zsh -c 'source "$1"; cvsm_get DATABASE_URL && cvsm_get -e staging API_KEY' _ "$SDK" >"$BATS_TEST_TMPDIR/out"
  [ "$(cat "$BATS_TEST_TMPDIR/out")" = "$(vector '.values[0].value, .values[2].value')" ]
}

@test "a token whose key part is malformed is a configuration error that quotes no part of it" {
  local bad key
  while IFS= read -r bad; do
    CVSM_TOKEN=$bad key=${bad#*.}
    run cvsm_check_config
    [ "$status" -eq 2 ]
    [[ $output == *"key part"* && $output != *"${bad%%.*}"* ]]
    [ "${#key}" -lt 3 ] || [[ $output != *"$key"* ]]
  done < <(jq -r '.bad_tokens[]' "$VECTORS")
}

@test "a token of the first format (no pin) is a configuration error saying to make a new token, asking nothing" {
  CVSM_TOKEN=$(vector .v1_token)
  local rc=0
  cvsm_get DATABASE_URL 2>"$BATS_TEST_TMPDIR/err" || rc=$?
  [ "$rc" -eq 2 ]
  [ "$CVSM_ERROR_KIND" = configuration ]
  [[ $(cat "$BATS_TEST_TMPDIR/err") == *"new token"* ]]
  [[ $(cat "$BATS_TEST_TMPDIR/err") != *"$KEY_PART"* && $(cat "$BATS_TEST_TMPDIR/err") != *"$API_TOKEN"* ]]
  run cvsm_check_config
  [ "$status" -eq 2 ]
  [[ $output == *"first format"*"new token"* ]]
  [ "$(count_requests)" -eq 0 ]
}

@test "every pinned token of the vectors has the shape; a pin of 0, with a leading zero or a long commitment does not" {
  local t
  while IFS= read -r t; do
    CVSM_TOKEN=$t
    run cvsm_check_config
    [ "$status" -eq 0 ]
  done < <(jq -r '.token.token, .token_pins[].token' "$VECTORS")
  for t in "$API_TOKEN.$KEY_PART.0.$(vector .token.commitment)" "$API_TOKEN.$KEY_PART.01.$(vector .token.commitment)" \
    "$API_TOKEN.$KEY_PART.1.$(vector .token.commitment)A" "$API_TOKEN.$KEY_PART.1" "$API_TOKEN.$KEY_PART..$(vector .token.commitment)" \
    "$API_TOKEN.$KEY_PART.12345678901.$(vector .token.commitment)" "$API_TOKEN.$KEY_PART.1.$(vector .token.commitment).x"; do
    CVSM_TOKEN=$t
    run cvsm_check_config
    [ "$status" -eq 2 ]
    [[ $output == *"key part"* && $output != *"$KEY_PART"* && $output != *"$API_TOKEN"* ]]
  done
}

@test "the vectors' pins: a team key that chains back to the pin opens, any other is the decryption error, never cached" {
  need_format2
  local i n outcome
  n=$(jq '.token_pins | length' "$VECTORS")
  for ((i = 0; i < n; i++)); do
    e2e_reset 0 ".token_pins[$i].key_answer"
    rm -rf "$CVSM_CACHE_DIR"
    CVSM_TOKEN=$(vector ".token_pins[$i].token")
    outcome=$(vector ".token_pins[$i].outcome")
    run cvsm_get DATABASE_URL
    if [ "$outcome" = ok ]; then
      [ "$status" -eq 0 ] || { echo "pin $i: $output"; false; }
      [ "$output" = "$(vector '.values[0].value')" ]
    else
      [ "$status" -eq 9 ] || { echo "pin $i ($(vector ".token_pins[$i].why")): $status $output"; false; }
      [[ $output != *"$(vector '.values[0].value')"* && $output != *"$KEY_PART"* ]]
      # Nothing is kept (no value, no team key), and the next call asks again: never retried.
      [ ! -e "$CVSM_CACHE_DIR/values" ] || [ -z "$(ls -A "$CVSM_CACHE_DIR/values")" ]
      run cvsm_get DATABASE_URL
      [ "$status" -eq 9 ]
      [ "$(count_requests /e2e/key)" -eq 2 ]
    fi
  done
}

@test "cvsm_describe shows neither part of the token" {
  run cvsm_describe
  [ "$status" -eq 0 ]
  [[ $output != *"$KEY_PART"* && $output != *"$API_TOKEN"* ]]
}

@test "the driver reports a value that does not open as kind decryption" {
  need_format2
  e2e_reset 6
  local opts
  opts=$(jq -nc --arg t "$CVSM_TOKEN" --arg b "$(stub_url)/api/v1" '{token: $t, base_url: $b, team: "acme"}')
  unset CVSM_TOKEN CVSM_BASE_URL CVSM_TEAM CVSM_CACHE_DIR
  run --separate-stderr bash "$DRIVER" < <(printf '%s\n' "{\"id\":1,\"op\":\"new_client\",\"args\":{\"options\":$opts}}" \
    '{"id":2,"op":"get","args":{"name":"DATABASE_URL"}}')
  [ "$status" -eq 0 ]
  [ "$(jq -r .error.kind <<<"${lines[1]}")" = decryption ]
  [ "$(jq -r .error.status <<<"${lines[1]}")" = null ]
}

@test "a cvsm that fails without its JSON error is a network error, its fields empty" {
  mkdir "$BATS_TEST_TMPDIR/fake"
  printf '#!/bin/sh\necho "panic: something" >&2\nexit 1\n' >"$BATS_TEST_TMPDIR/fake/cvsm"
  chmod +x "$BATS_TEST_TMPDIR/fake/cvsm"
  PATH="$BATS_TEST_TMPDIR/fake:$PATH"
  local rc=0
  cvsm_get DATABASE_URL 2>/dev/null || rc=$?
  [ "$rc" -eq 8 ]
  [ "$CVSM_ERROR_KIND" = network ]
  [ "$CVSM_ERROR_MESSAGE" = "the cvsm command failed without saying why" ]
  [ -z "$CVSM_ERROR_STATUS$CVSM_ERROR_REQUEST_ID$CVSM_ERROR_SUGGESTION" ]
}
