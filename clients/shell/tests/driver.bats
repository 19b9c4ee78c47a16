#!/usr/bin/env bats
# driver.bats - the conformance driver: JSON lines in and out, error kinds from exit codes,
# client snapshots, and the environment ops.

load helpers

setup_file() { stub_start; }
teardown_file() { stub_stop; }
setup() {
  stub_reset
  unset CVSM_TOKEN CVSM_BASE_URL CVSM_TEAM CVSM_ENVIRONMENT CVSM_CACHE_TTL CVSM_TIMEOUT \
    CVSM_MAX_RETRIES CVSM_CACHE_DIR
  OPTS=$(jq -nc --arg t "$TOKEN" --arg b "$(stub_url)/api/v1" '{token: $t, base_url: $b, team: "acme"}')
}

# drive LINES...: runs the driver on the given request lines; stdout in $output / ${lines[@]}.
drive() {
  run --separate-stderr bash "$DRIVER" < <(printf '%s\n' "$@")
}

# answer N: the N-th response line (from 0).
answer() { printf '%s\n' "${lines[$1]}"; }

@test "new_client without a token answers kind configuration and leaves no client" {
  drive '{"id":1,"op":"new_client","args":{"options":{"base_url":"http://x/api/v1","team":"acme"}}}' \
    '{"id":2,"op":"get","args":{"name":"API_KEY"}}'
  [ "$status" -eq 0 ]
  [ "$(answer 0)" = '{"id":1,"ok":false,"error":{"kind":"configuration","message":"CVSM_TOKEN is not set","status":null,"retry_after":null}}' ]
  [ "$(answer 1 | jq -r .ok)" = false ]
  [ "$(count_requests)" -eq 0 ]
}

@test "new_client answers the effective configuration, and describe never holds the token" {
  drive "{\"id\":1,\"op\":\"new_client\",\"args\":{\"options\":$OPTS}}" \
    '{"id":2,"op":"describe","args":{}}'
  [ "$(answer 0 | jq -c .result.config)" = "{\"base_url\":\"$(stub_url)/api/v1\",\"team\":\"acme\",\"environment\":\"production\",\"cache_ttl\":30,\"timeout\":10,\"max_retries\":2}" ]
  [ "$(answer 1 | jq -r .ok)" = true ]
  [[ "$(answer 1 | jq -r .result.text)" == *"team=acme"* ]]
  [[ ${lines[1]} != *"$TOKEN"* ]]
}

@test "get, get_all and their values round-trip through the driver exactly" {
  drive "{\"id\":1,\"op\":\"new_client\",\"args\":{\"options\":$OPTS}}" \
    '{"id":2,"op":"get","args":{"name":"MULTI"}}' \
    '{"id":3,"op":"get","args":{"name":"EMPTY"}}' \
    '{"id":4,"op":"get_all","args":{}}'
  [ "$(answer 1)" = '{"id":2,"ok":true,"result":{"value":"line1\nline2\n\n"}}' ]
  [ "$(answer 2)" = '{"id":3,"ok":true,"result":{"value":""}}' ]
  [ "$(answer 3 | jq -r '.result.values.QUOTE')" = "it's \"q\" \$(touch PWNED) \`id\` \\ \$HOME" ]
  [ "$(answer 3 | jq -c '.result.values | keys')" = '["API_KEY","DB","DB_URL","EMPTY","MULTI","QUOTE","UNICODE"]' ]
  [ "$(answer 3 | jq -r '.result.values.MULTI')" = "$(printf 'line1\nline2\n\n')" ]
}

@test "error kinds come from exit codes, with status and retry_after" {
  stub_fault '[{"path": "/api/v1/teams/'"$TEAM_ID"'/secrets/s-api", "status": 429, "retry_after": "9", "count": 1},
               {"path": "/api/v1/teams/'"$TEAM_ID"'/secrets/s-api", "status": 500, "count": 1},
               {"path": "/api/v1/teams/'"$TEAM_ID"'/secrets/s-api", "status": 403, "count": 1}]'
  drive "{\"id\":1,\"op\":\"new_client\",\"args\":{\"options\":$OPTS}}" \
    '{"id":2,"op":"get","args":{"name":"API_KEY"}}' \
    '{"id":3,"op":"get","args":{"name":"API_KEY"}}' \
    '{"id":4,"op":"get","args":{"name":"API_KEY"}}' \
    '{"id":5,"op":"get","args":{"name":"api_key"}}'
  [ "$(answer 1 | jq -c .error)" = '{"kind":"rate_limited","message":"HTTP 429: kesalahan buatan (retry after 9s)","status":429,"retry_after":9}' ]
  [ "$(answer 2 | jq -c '.error | [.kind, .status]')" = '["api",500]' ]
  [ "$(answer 3 | jq -c '.error | [.kind, .status]')" = '["permission_denied",403]' ]
  [ "$(answer 4 | jq -c '.error | [.kind, .status, .message]')" = '["not_found",null,"secret \"api_key\" not found in production; did you mean \"API_KEY\"?"]' ]
}

@test "the driver's get uses the cache across ops, and clear_cache empties it" {
  drive "{\"id\":1,\"op\":\"new_client\",\"args\":{\"options\":$OPTS}}" \
    '{"id":2,"op":"get","args":{"name":"API_KEY"}}' \
    '{"id":3,"op":"get","args":{"name":"API_KEY"}}' \
    '{"id":4,"op":"clear_cache","args":{}}' \
    '{"id":5,"op":"get","args":{"name":"API_KEY"}}'
  [ "$(answer 3)" = '{"id":4,"ok":true,"result":{}}' ]
  [ "$(count_requests /secrets/s-api)" -eq 2 ]
}

@test "each new_client starts with an empty cache" {
  drive "{\"id\":1,\"op\":\"new_client\",\"args\":{\"options\":$OPTS}}" \
    '{"id":2,"op":"get","args":{"name":"API_KEY"}}' \
    "{\"id\":3,\"op\":\"new_client\",\"args\":{\"options\":$OPTS}}" \
    '{"id":4,"op":"get","args":{"name":"API_KEY"}}'
  [ "$(count_requests /secrets/s-api)" -eq 2 ]
  [ "$(count_requests /teams)" -eq 2 ]
}

@test "new_client reads CVSM_* set by set_env, options win, and later set_env does not change the client" {
  drive "{\"id\":1,\"op\":\"set_env\",\"args\":{\"set\":{\"CVSM_TOKEN\":\"$TOKEN\",\"CVSM_BASE_URL\":\"$(stub_url)/api/v1\",\"CVSM_TEAM\":\"nobody\",\"CVSM_ENVIRONMENT\":\"staging\",\"CVSM_CACHE_TTL\":\"0\"}}}" \
    '{"id":2,"op":"new_client","args":{"options":{"team":"acme"}}}' \
    '{"id":3,"op":"set_env","args":{"set":{"CVSM_ENVIRONMENT":"development"},"unset":["CVSM_TOKEN"]}}' \
    '{"id":4,"op":"get","args":{"name":"API_KEY"}}' \
    '{"id":5,"op":"new_client","args":{"options":{}}}'
  [ "$(answer 1 | jq -c '.result.config | [.team, .environment, .cache_ttl]')" = '["acme","staging",0]' ]
  [ "$(answer 3 | jq -r .result.value)" = k-staging ]
  [ "$(answer 4 | jq -c '.error | [.kind, .message]')" = '["configuration","CVSM_TOKEN is not set"]' ]
}

@test "inject writes the driver's environment, keeping or overwriting, and get_env reads it" {
  drive "{\"id\":1,\"op\":\"new_client\",\"args\":{\"options\":$OPTS}}" \
    '{"id":2,"op":"set_env","args":{"set":{"API_KEY":"mine","DB":""}}}' \
    '{"id":3,"op":"inject","args":{}}' \
    '{"id":4,"op":"get_env","args":{"names":["API_KEY","DB","MULTI","NOT_THERE"]}}' \
    '{"id":5,"op":"inject","args":{"overwrite":true}}' \
    '{"id":6,"op":"get_env","args":{"names":["API_KEY","DB"]}}'
  [ "$(answer 2 | jq -c .result.names)" = '["DB_URL","EMPTY","MULTI","QUOTE","UNICODE"]' ]
  [ "$(answer 3 | jq -c .result.values)" = '{"API_KEY":"mine","DB":"","MULTI":"line1\nline2\n\n","NOT_THERE":null}' ]
  [ "$(answer 4 | jq -c .result.names)" = '["API_KEY","DB","DB_URL","EMPTY","MULTI","QUOTE","UNICODE"]' ]
  [ "$(answer 5 | jq -c .result.values)" = '{"API_KEY":"k-prod","DB":"db-short"}' ]
}

@test "an unknown op answers unsupported, and shutdown answers then exits 0" {
  drive '{"id":1,"op":"fly","args":{}}' '{"id":2,"op":"shutdown","args":{}}' '{"id":3,"op":"describe","args":{}}'
  [ "$status" -eq 0 ]
  [ "$(answer 0 | jq -c '[.id, .ok, .error.kind]')" = '[1,false,"unsupported"]' ]
  [ "$(answer 1)" = '{"id":2,"ok":true,"result":{}}' ]
  [ "${#lines[@]}" -eq 2 ]
}

@test "the driver exits 0 when stdin closes, and stdout carries protocol lines only" {
  drive "{\"id\":1,\"op\":\"new_client\",\"args\":{\"options\":$OPTS}}" \
    '{"id":2,"op":"get","args":{"name":"NOPE"}}'
  [ "$status" -eq 0 ]
  [ "${#lines[@]}" -eq 2 ]
  answer 0 | jq -e '.id == 1 and .ok' >/dev/null
  answer 1 | jq -e '.id == 2 and (.ok | not)' >/dev/null
  [[ $stderr == *'cvsm: secret "NOPE" not found in production'* ]]
}

@test "large multi-byte values survive get and get_all through the driver" {
  local big
  big=$(python3 -c 'print("é" * 32768, end="")')
  stub_reset "$(jq -nc --arg big "$big" '[{id: "b", name: "BIG", environment: "production", value: $big},
    {id: "c", name: "CTRL", environment: "production", value: "a\r\nb\tc\n"}]')"
  drive "{\"id\":1,\"op\":\"new_client\",\"args\":{\"options\":$OPTS}}" \
    '{"id":2,"op":"get","args":{"name":"BIG"}}' \
    '{"id":3,"op":"get_all","args":{}}' \
    '{"id":4,"op":"inject","args":{}}' \
    '{"id":5,"op":"get_env","args":{"names":["BIG"]}}'
  [ "$(answer 1 | jq -j .result.value)" = "$big" ]
  [ "$(answer 2 | jq -j .result.values.BIG)" = "$big" ]
  [ "$(answer 2 | jq -c .result.values.CTRL)" = '"a\r\nb\tc\n"' ]
  [ "$(answer 4 | jq -j .result.values.BIG)" = "$big" ]
}
