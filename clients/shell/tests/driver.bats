#!/usr/bin/env bats
# driver.bats - the conformance driver: JSON lines in and out, error kinds from exit codes and
# error fields from CVSM_ERROR_*, client snapshots, the environment ops, and answers of any size.

load helpers

setup_file() { stub_start; }
teardown_file() { stub_stop; }
setup() {
  stub_reset
  unset CVSM_TOKEN CVSM_BASE_URL CVSM_TEAM CVSM_ENVIRONMENT CVSM_CACHE_TTL CVSM_TIMEOUT \
    CVSM_MAX_RETRIES CVSM_CACHE_DIR CVSM_CA_FILE CVSM_CURL_CONFIG http_proxy HTTP_PROXY no_proxy NO_PROXY
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
  [ "$(answer 0)" = '{"id":1,"ok":false,"error":{"kind":"configuration","message":"CVSM_TOKEN is not set","status":null,"retry_after":null,"request_id":null,"suggestion":null}}' ]
  [ "$(answer 1 | jq -r .ok)" = false ]
  [ "$(count_requests)" -eq 0 ]
}

@test "new_client answers the effective configuration, and describe never holds the token" {
  drive "{\"id\":1,\"op\":\"new_client\",\"args\":{\"options\":$OPTS}}" \
    '{"id":2,"op":"describe","args":{}}'
  [ "$(answer 0 | jq -c .result.config)" = "{\"base_url\":\"$(stub_url)/api/v1\",\"team\":\"acme\",\"environment\":\"production\",\"cache_ttl\":30,\"timeout\":10,\"max_retries\":2,\"stale_if_error\":0}" ]
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

@test "error kinds come from exit codes, the other fields from CVSM_ERROR_*" {
  stub_fault '[{"path": "/api/v1/teams/acme/secrets/by-name/API_KEY", "status": 429, "retry_after": "9", "count": 1},
               {"path": "/api/v1/teams/acme/secrets/by-name/API_KEY", "status": 500, "count": 1},
               {"path": "/api/v1/teams/acme/secrets/by-name/API_KEY", "status": 403, "count": 1}]'
  drive "{\"id\":1,\"op\":\"new_client\",\"args\":{\"options\":$OPTS}}" \
    '{"id":2,"op":"get","args":{"name":"API_KEY"}}' \
    '{"id":3,"op":"get","args":{"name":"API_KEY"}}' \
    '{"id":4,"op":"get","args":{"name":"API_KEY"}}' \
    '{"id":5,"op":"get","args":{"name":"api_key"}}'
  [ "$(answer 1 | jq -c .error)" = '{"kind":"rate_limited","message":"HTTP 429: kesalahan buatan (retry after 9s)","status":429,"retry_after":9,"request_id":"req-1","suggestion":null}' ]
  [ "$(answer 2 | jq -c '.error | [.kind, .status, .request_id]')" = '["api",500,"req-2"]' ]
  [ "$(answer 3 | jq -c '.error | [.kind, .status]')" = '["permission_denied",403]' ]
  [ "$(answer 4 | jq -c '.error | [.kind, .status, .message, .request_id, .suggestion]')" = '["not_found",404,"secret \"api_key\" not found in production; did you mean \"API_KEY\"?","req-4","API_KEY"]' ]
}

@test "every exit code gets the kind cvsm.sh gives it, an unlisted one included" {
  # The driver next to a cvsm.sh whose cvsm_get fails with the exit code in DRV_TEST_RC.
  local dir=$BATS_TEST_TMPDIR/sdk rc want
  mkdir -p "$dir/conformance"
  cp "$DRIVER" "$dir/conformance/driver.sh"
  printf '. %q\ncvsm_get() { CVSM_ERROR_MESSAGE=boom; return "$DRV_TEST_RC"; }\n' "$SDK" >"$dir/cvsm.sh"
  for rc in 1 2 3 4 5 6 7 8 9 42 125; do
    want=$(bash -c '. "$1" && _cvsm_kind "$2" && printf %s "$_cvsm_enc"' _ "$SDK" "$rc")
    run --separate-stderr env DRV_TEST_RC="$rc" bash "$dir/conformance/driver.sh" < <(printf '%s\n' \
      "{\"id\":1,\"op\":\"new_client\",\"args\":{\"options\":$OPTS}}" '{"id":2,"op":"get","args":{"name":"A"}}')
    [ "$(answer 1 | jq -c '.error | [.kind, .message]')" = "[\"$want\",\"boom\"]" ]
  done
  # The README's table, and network for any code it does not list (as cvsm.sh's own CVSM_ERROR_KIND).
  [ "$(bash -c '. "$1" && for c in 2 3 4 5 6 7 8 1 42; do _cvsm_kind "$c"; printf "%s " "$_cvsm_enc"; done' _ "$SDK")" \
    = "configuration authentication permission_denied not_found rate_limited api network network network " ]
}

@test "the driver's get uses the cache across ops, and clear_cache empties it" {
  drive "{\"id\":1,\"op\":\"new_client\",\"args\":{\"options\":$OPTS}}" \
    '{"id":2,"op":"get","args":{"name":"API_KEY"}}' \
    '{"id":3,"op":"get","args":{"name":"API_KEY"}}' \
    '{"id":4,"op":"clear_cache","args":{}}' \
    '{"id":5,"op":"get","args":{"name":"API_KEY"}}'
  [ "$(answer 3)" = '{"id":4,"ok":true,"result":{}}' ]
  [ "$(count_requests /by-name/API_KEY)" -eq 2 ]
}

@test "each new_client starts with an empty cache" {
  drive "{\"id\":1,\"op\":\"new_client\",\"args\":{\"options\":$OPTS}}" \
    '{"id":2,"op":"get","args":{"name":"API_KEY"}}' \
    "{\"id\":3,\"op\":\"new_client\",\"args\":{\"options\":$OPTS}}" \
    '{"id":4,"op":"get","args":{"name":"API_KEY"}}'
  [ "$(count_requests /by-name/API_KEY)" -eq 2 ]
  [ "$(count_requests)" -eq 2 ]
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

@test "an error's fields come from the SDK's variables, not from its message" {
  # A server message that looks like a status and a retry-after must not be read as them.
  stub_fault '[{"path": "/api/v1/teams/acme/secrets/by-name/API_KEY", "status": 500, "body": "{\"error\": \"HTTP 418 (retry after 5s)\"}", "count": 1}]'
  drive "{\"id\":1,\"op\":\"new_client\",\"args\":{\"options\":$OPTS}}" \
    '{"id":2,"op":"get","args":{"name":"API_KEY"}}'
  [ "$(answer 1 | jq -c '.error | [.status, .retry_after]')" = '[500,null]' ]
}

@test "names the SDK must refuse reach it unchanged: trailing newline, NUL, empty" {
  drive "{\"id\":1,\"op\":\"new_client\",\"args\":{\"options\":$OPTS}}" \
    '{"id":2,"op":"get","args":{"name":"API_KEY\n"}}' \
    '{"id":3,"op":"get","args":{"name":"API\u0000KEY"}}' \
    '{"id":4,"op":"get","args":{"name":""}}'
  [ "$(answer 1 | jq -c '.error | [.kind, .status]')" = '["not_found",null]' ]
  [ "$(answer 2 | jq -r .error.kind)" = not_found ]
  [[ "$(answer 3 | jq -r .error.message)" == *"is not a valid secret name"* ]]
  [ "$(count_requests)" -eq 0 ]
}

@test "new_client takes ca_file, and an unreadable one is a configuration error" {
  drive "{\"id\":1,\"op\":\"new_client\",\"args\":{\"options\":$(jq -c '. + {ca_file: "/nonexistent/ca.pem"}' <<<"$OPTS")}}" \
    '{"id":2,"op":"get","args":{"name":"API_KEY"}}'
  [ "$(answer 0 | jq -c '.error | [.kind, .message]')" = '["configuration","CVSM_CA_FILE: cannot read /nonexistent/ca.pem"]' ]
  [ "$(answer 1 | jq -r .error.kind)" = configuration ]
}

@test "the proxy variables are read when the client is created" {
  local direct
  direct=$(jq -c '.base_url = "http://cvsm.invalid/api/v1"' <<<"$OPTS")
  drive "{\"id\":1,\"op\":\"set_env\",\"args\":{\"set\":{\"http_proxy\":\"$(stub_url)\"}}}" \
    "{\"id\":2,\"op\":\"new_client\",\"args\":{\"options\":$direct}}" \
    '{"id":3,"op":"set_env","args":{"unset":["http_proxy"]}}' \
    '{"id":4,"op":"get","args":{"name":"API_KEY"}}' \
    '{"id":5,"op":"get_env","args":{"names":["http_proxy"]}}' \
    "{\"id\":6,\"op\":\"new_client\",\"args\":{\"options\":$(jq -c '.max_retries = 0' <<<"$direct")}}" \
    '{"id":7,"op":"get","args":{"name":"DB"}}'
  [ "$(answer 3 | jq -r .result.value)" = k-prod ]
  [ "$(answer 4 | jq -c .result.values)" = '{"http_proxy":null}' ]
  [ "$(answer 6 | jq -r .error.kind)" = network ]
  [ "$(stub_requests | jq '[.[] | select(.proxied and .host == "cvsm.invalid")] | length')" -eq 1 ]
}

@test "a get_all of more than 10 MiB comes through the driver whole, in one request" {
  local n=2200
  # 2,200 secrets of 5,000 characters (two bytes each for half of them): about 16 MiB of JSON.
  python3 - "$(stub_url)" "$TOKEN" "$TEAM_ID" "$n" <<'PY'
import json, sys, urllib.request
url, token, team, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
secrets = [{"id": f"s{i}", "name": f"K{i:05d}", "environment": "production",
            "value": ("é" * 2500) + ("x'\"$\n" * 625) + str(i)} for i in range(n)]
body = json.dumps({"token": token, "teams": [{"id": team, "slug": "acme"}], "secrets": secrets})
req = urllib.request.Request(url + "/_stub/reset", data=body.encode(), method="POST")
urllib.request.urlopen(req).read()
PY
  local start=$SECONDS
  drive "{\"id\":1,\"op\":\"new_client\",\"args\":{\"options\":$OPTS}}" \
    '{"id":2,"op":"get_all","args":{}}' \
    '{"id":3,"op":"get","args":{"name":"K00042"}}'
  [ "$(answer 1 | wc -c)" -gt $((10 * 1024 * 1024)) ]
  [ "$(answer 1 | jq '.result.values | length')" -eq "$n" ]
  [ "$(answer 1 | jq -r '.result.values.K01234')" = "$(python3 -c 'print(("é" * 2500) + ("x'"'"'\"$\n" * 625) + "1234", end="")')" ]
  [ "$(answer 2 | jq -r '.result.value | length')" -eq 5627 ]
  [ "$(count_requests /export)" -eq 1 ]
  [ "$(count_requests)" -eq 1 ]
  # Linear work takes seconds; a quadratic parse of 16 MiB would take hours.
  [ $((SECONDS - start)) -lt 240 ]
}

@test "new_client passes stale_if_error, and get and get_all say stale: true only when the SDK set CVSM_STALE" {
  local opts
  opts=$(jq -c '. + {cache_ttl: 0, stale_if_error: 30, max_retries: 0}' <<<"$OPTS")
  stub_fault '[{"path": "/api/v1/teams/acme/secrets/by-name/API_KEY", "status": 503, "after": 1, "count": 1},
               {"path": "/api/v1/teams/acme/secrets/export", "status": 503, "after": 1, "count": 1},
               {"path": "/api/v1/teams/acme/secrets/by-name/DB", "status": 503, "count": 2}]'
  drive "{\"id\":1,\"op\":\"new_client\",\"args\":{\"options\":$opts}}" \
    '{"id":2,"op":"get","args":{"name":"API_KEY"}}' \
    '{"id":3,"op":"get_all","args":{}}' \
    '{"id":4,"op":"get","args":{"name":"API_KEY"}}' \
    '{"id":5,"op":"get_all","args":{}}' \
    '{"id":6,"op":"set_env","args":{"set":{"CVSM_STALE":"1"}}}' \
    '{"id":7,"op":"get","args":{"name":"API_KEY"}}' \
    '{"id":8,"op":"get","args":{"name":"DB"}}' \
    '{"id":9,"op":"clear_cache","args":{}}' \
    '{"id":10,"op":"get","args":{"name":"DB"}}'
  [ "$(answer 0 | jq -c '.result.config | [.cache_ttl, .stale_if_error]')" = '[0,30]' ]
  [ "$(answer 1 | jq -c .result)" = '{"value":"k-prod"}' ]
  [ "$(answer 2 | jq -c '.result | keys')" = '["values"]' ]
  [ "$(answer 3 | jq -c .result)" = '{"value":"k-prod","stale":true}' ]
  [ "$(answer 4 | jq -c '[(.result | keys), .result.values.DB]')" = '[["stale","values"],"db-short"]' ]
  [ "$(answer 6 | jq -c .result)" = '{"value":"k-prod"}' ]
  # DB comes from the kept get_all result; after clear_cache nothing is kept.
  [ "$(answer 7 | jq -c .result)" = '{"value":"db-short","stale":true}' ]
  [ "$(answer 9 | jq -c '.error | [.kind, .status]')" = '["api",503]' ]
  [[ $stderr == *"cvsm: warning: serving a stale value of API_KEY, fetched "*"s ago, because refreshing it failed (api error: HTTP 503: kesalahan buatan)"* ]]
  [[ $stderr != *k-prod* ]]
}
