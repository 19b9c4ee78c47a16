#!/usr/bin/env bash
# driver.sh - the conformance driver of the cvsm shell SDK (conformance/PROTOCOL.md).
#
# It reads one JSON request per line on stdin and writes one JSON response per line on stdout.
# It sources cvsm.sh once and calls the cvsm_* functions in its own shell process, so inject,
# set_env and get_env all act on this process's environment. An error's kind comes from the exit
# code, as cvsm.sh maps it (README.md, "Errors"); its message, status, retry_after, request_id
# and suggestion from the CVSM_ERROR_* variables the function sets, never from the text on stderr.
# Every answer is read and written by jq, in linear time, whatever its size.
#
# A "client" is a snapshot taken at new_client: the explicit options, then the CVSM_* variables of
# this process at that moment, the proxy variables, plus a fresh private cache directory
# (CVSM_CACHE_DIR). Every later call runs with exactly that snapshot, so set_env after new_client
# does not change the client, just as it would not change a constructed client in the other
# languages. A get or get_all result carries "stale": true only when the function set CVSM_STALE=1,
# the SDK's own mark of a value served by stale-if-error.
set -euo pipefail
umask 077

_drv_here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# An end-to-end team's token reads through the cvsm command: without one on PATH, the one make build
# put in clients/go/bin.
if ! type -P cvsm >/dev/null && [ -x "$_drv_here/../../go/bin/cvsm" ]; then
  PATH="$(cd "$_drv_here/../../go/bin" && pwd):$PATH"
fi
# shellcheck disable=SC1091 # checked on its own by make test
. "$_drv_here/../cvsm.sh"

# The clients' caches hold test secrets: keep them on a per-user tmpfs when there is one.
_drv_base=${TMPDIR:-/tmp}
for _drv_d in "${XDG_RUNTIME_DIR:-}" /dev/shm; do
  if [ -n "$_drv_d" ] && [ -d "$_drv_d" ] && [ -w "$_drv_d" ]; then
    _drv_base=$_drv_d
    break
  fi
done
_drv_tmp=$(mktemp -d "$_drv_base/cvsm-driver.XXXXXX")
trap 'rm -rf -- "$_drv_tmp"' EXIT
_drv_out=$_drv_tmp/out
_drv_err=$_drv_tmp/err
_drv_res=$_drv_tmp/result

# The CVSM_* variables a client reads, and the proxy variables curl reads (plus REQUEST_METHOD,
# which turns HTTP_PROXY off, as in CGI).
_drv_vars=(TOKEN BASE_URL TEAM ENVIRONMENT CACHE_TTL TIMEOUT MAX_RETRIES CA_FILE CURL_CONFIG STALE_IF_ERROR)
_drv_proxy_vars=(http_proxy HTTP_PROXY https_proxy HTTPS_PROXY all_proxy ALL_PROXY no_proxy NO_PROXY REQUEST_METHOD)
_drv_has_client=0
_drv_clients=0
declare -A _drv_c=()
declare -A _drv_p=()

# _drv_reply ID [FILE FILTER]: writes the success response for request ID with the result object in
# $_drv_res, or the one FILTER makes of FILE.
_drv_reply() {
  jq -c --argjson id "$1" "{id: \$id, ok: true, result: (${3:-.})}" <"${2:-$_drv_res}"
}

# _drv_fail ID KIND MESSAGE [STATUS] [RETRY_AFTER] [REQUEST_ID] [SUGGESTION]: writes a failure
# response; an empty field is null.
_drv_fail() {
  jq -nc --argjson id "$1" --arg kind "$2" --arg msg "$3" --arg st "${4-}" --arg ra "${5-}" \
    --arg rid "${6-}" --arg sugg "${7-}" \
    'def orNull: if . == "" then null else . end;
    {id: $id, ok: false, error: {kind: $kind, message: $msg,
      status: ($st | orNull | if . then tonumber else . end),
      retry_after: ($ra | orNull | if . then tonumber else . end),
      request_id: ($rid | orNull), suggestion: ($sugg | orNull)}}'
}

# _drv_sdk_fail ID RC: turns the exit code RC and the CVSM_ERROR_* variables into a failure. The
# kind is the one cvsm.sh itself gives RC (_cvsm_kind, its one table of exit codes), so the driver
# never disagrees with the library, not even on a code the README does not list.
_drv_sdk_fail() {
  local id=$1 rc=$2 msg _cvsm_enc=''
  _cvsm_kind "$rc"
  msg=${CVSM_ERROR_MESSAGE-}
  [ -n "$msg" ] || msg="exit code $rc with no CVSM_ERROR_MESSAGE: $(head -c 500 "$_drv_err")"
  cat "$_drv_err" >&2
  _drv_fail "$id" "$_cvsm_enc" "$msg" "${CVSM_ERROR_STATUS-}" "${CVSM_ERROR_RETRY_AFTER-}" \
    "${CVSM_ERROR_REQUEST_ID-}" "${CVSM_ERROR_SUGGESTION-}"
}

# _drv_proxy_apply: sets the proxy variables to the client's snapshot, saving this process's own
# values in _drv_saved; _drv_proxy_restore puts those back, except where the call itself (inject)
# changed a variable.
declare -A _drv_saved=()
_drv_proxy_apply() {
  local v
  _drv_saved=()
  for v in "${_drv_proxy_vars[@]}"; do
    if [ -n "${!v+x}" ]; then _drv_saved[$v]="s${!v}"; else _drv_saved[$v]=u; fi
    case ${_drv_p[$v]-u} in
      s*) export "$v=${_drv_p[$v]#s}" ;;
      *) unset -v "$v" ;;
    esac
  done
}
_drv_proxy_restore() {
  local v now
  for v in "${_drv_proxy_vars[@]}"; do
    if [ -n "${!v+x}" ]; then now="s${!v}"; else now=u; fi
    [ "$now" = "${_drv_p[$v]-u}" ] || continue
    case ${_drv_saved[$v]} in
      s*) export "$v=${_drv_saved[$v]#s}" ;;
      *) unset -v "$v" ;;
    esac
  done
}

# _drv_call FUNCTION ARGS...: runs a cvsm_* function in this shell with the current client's
# configuration, stdout to $_drv_out and stderr to $_drv_err; returns its exit code.
_drv_call() {
  local rc=0
  _drv_proxy_apply
  CVSM_TOKEN=${_drv_c[TOKEN]-} CVSM_BASE_URL=${_drv_c[BASE_URL]-} CVSM_TEAM=${_drv_c[TEAM]-} \
    CVSM_ENVIRONMENT=${_drv_c[ENVIRONMENT]-} CVSM_CACHE_TTL=${_drv_c[CACHE_TTL]-} \
    CVSM_TIMEOUT=${_drv_c[TIMEOUT]-} CVSM_MAX_RETRIES=${_drv_c[MAX_RETRIES]-} \
    CVSM_CA_FILE=${_drv_c[CA_FILE]-} CVSM_CURL_CONFIG=${_drv_c[CURL_CONFIG]-} \
    CVSM_STALE_IF_ERROR=${_drv_c[STALE_IF_ERROR]-} CVSM_CACHE_DIR=${_drv_c[CACHE_DIR]-} "$@" >"$_drv_out" 2>"$_drv_err" || rc=$?
  _drv_proxy_restore
  return "$rc"
}

# _drv_new_client ID ARGS: snapshots the configuration and checks it (cvsm_check_config).
_drv_new_client() {
  local id=$1 args=$2 v key opt rc=0
  _drv_has_client=0
  _drv_c=()
  _drv_p=()
  for v in "${_drv_vars[@]}"; do
    key=CVSM_$v
    _drv_c[$v]=${!key-}
  done
  for v in "${_drv_proxy_vars[@]}"; do
    if [ -n "${!v+x}" ]; then _drv_p[$v]="s${!v}"; else _drv_p[$v]=u; fi
  done
  # Explicit options win over the environment: one "KEY<NUL>value<NUL>" pair per option present.
  while IFS= read -r -d '' opt && IFS= read -r -d '' v; do
    case $opt in
      token) _drv_c[TOKEN]=$v ;;
      base_url) _drv_c[BASE_URL]=$v ;;
      team) _drv_c[TEAM]=$v ;;
      environment) _drv_c[ENVIRONMENT]=$v ;;
      cache_ttl) _drv_c[CACHE_TTL]=$v ;;
      timeout) _drv_c[TIMEOUT]=$v ;;
      max_retries) _drv_c[MAX_RETRIES]=$v ;;
      ca_file) _drv_c[CA_FILE]=$v ;;
      stale_if_error) _drv_c[STALE_IF_ERROR]=$v ;;
    esac
  done < <(jq -j '(.options // {}) | to_entries[] | select(.value != null)
    | "\(.key)\u0000\(.value | if type == "string" then . else tojson end)\u0000"' <<<"$args")
  _drv_clients=$((_drv_clients + 1))
  _drv_c[CACHE_DIR]=$_drv_tmp/cache$_drv_clients
  _drv_call cvsm_check_config || rc=$?
  if [ "$rc" != 0 ]; then
    _drv_c=()
    _drv_sdk_fail "$id" "$rc"
    return
  fi
  _drv_call cvsm_describe --json || rc=$?
  if [ "$rc" != 0 ]; then
    _drv_c=()
    _drv_sdk_fail "$id" "$rc"
    return
  fi
  _drv_has_client=1
  jq -c '{config: .}' <"$_drv_out" >"$_drv_res"
  _drv_reply "$id"
}

# _drv_set_env ID ARGS: sets and unsets variables of this process.
_drv_set_env() {
  local id=$1 args=$2 k v
  while IFS= read -r -d '' k && IFS= read -r -d '' v; do
    if ! [[ $k =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]] || [[ $k == _drv_* ]]; then
      _drv_fail "$id" internal "set_env: unusable variable name"
      return
    fi
    export "$k=$v"
  done < <(jq -j '(.set // {}) | to_entries[] | "\(.key)\u0000\(.value | if type == "string" then . else tojson end)\u0000"' <<<"$args")
  while IFS= read -r -d '' k; do
    if [[ $k =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]] && [[ $k != _drv_* ]]; then
      unset -v "$k" || true
    fi
  done < <(jq -j '(.unset // [])[] | "\(.)\u0000"' <<<"$args")
  echo '{}' >"$_drv_res"
  _drv_reply "$id"
}

# _drv_get_env ID ARGS: reports variables of this process (null when unset).
_drv_get_env() {
  local id=$1 args=$2 k pairs=$_drv_tmp/env
  : >"$pairs"
  while IFS= read -r -d '' k; do
    if [[ $k =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]] && [ -n "${!k+x}" ]; then
      printf '%s\0s%s\0' "$k" "${!k}" >>"$pairs"
    else
      printf '%s\0n\0' "$k" >>"$pairs"
    fi
  done < <(jq -j '(.names // [])[] | "\(.)\u0000"' <<<"$args")
  # The stream ends with "END": jq 1.6 loses a NUL that is the very last byte of raw input. (Raw
  # input is read with --rawfile: jq 1.6's -R splits multi-byte characters at 4 KiB.)
  printf 'END' >>"$pairs"
  jq -n --rawfile raw "$pairs" '$raw | split("\u0000") | .[:-1] | [range(0; length; 2) as $i
    | {key: .[$i], value: (.[$i + 1] | if startswith("s") then .[1:] else null end)}]
    | {values: from_entries}' >"$_drv_res"
  rm -f -- "$pairs"
  _drv_reply "$id"
}

# _drv_handle LINE: answers one request.
_drv_handle() {
  local line=$1 id op args rc=0 overwrite name env
  if ! id=$(jq -c '.id // null' <<<"$line" 2>/dev/null); then
    _drv_fail null internal "request is not valid JSON"
    return
  fi
  op=$(jq -r '.op // ""' <<<"$line")
  args=$(jq -c '.args // {}' <<<"$line")
  case $op in
    new_client)
      _drv_new_client "$id" "$args"
      return
      ;;
    set_env)
      _drv_set_env "$id" "$args"
      return
      ;;
    get_env)
      _drv_get_env "$id" "$args"
      return
      ;;
    capabilities)
      echo '{"capabilities":["tls_ca_file","proxy_env","refresh"]}' >"$_drv_res"
      _drv_reply "$id"
      return
      ;;
    shutdown)
      echo '{}' >"$_drv_res"
      _drv_reply "$id"
      exit 0
      ;;
    get | refresh | get_all | inject | clear_cache | describe) ;;
    *)
      _drv_fail "$id" unsupported "unknown op \"$op\""
      return
      ;;
  esac
  if [ "$_drv_has_client" != 1 ]; then
    _drv_fail "$id" configuration "no client: new_client failed or was not called"
    return
  fi
  case $op in
    get)
      # The name exactly (trailing newlines kept); one holding NUL, which no shell string can,
      # becomes a name with a control character, which is just as invalid.
      name=$(jq -j '.name // "" | if (explode | any(. == 0)) then "\u0001" + . else . end' <<<"$args"; printf x)
      name=${name%x}
      _drv_call cvsm_get -- "$name" || rc=$?
      [ "$rc" = 0 ] && jq -n --rawfile v "$_drv_out" --arg stale "$CVSM_STALE" \
        '{value: $v} + (if $stale == "1" then {stale: true} else {} end)' >"$_drv_res"
      ;;
    refresh)
      # cvsm_refresh NAME [ENVIRONMENT]: the environment, when the request has one, as the second
      # argument (R17's), not as --environment, which would change the client's own.
      name=$(jq -j '.name // "" | if (explode | any(. == 0)) then "\u0001" + . else . end' <<<"$args"; printf x)
      name=${name%x}
      if [ "$(jq -r '.environment | type' <<<"$args")" = string ]; then
        env=$(jq -j '.environment' <<<"$args"; printf x)
        env=${env%x}
        _drv_call cvsm_refresh -- "$name" "$env" || rc=$?
      else
        _drv_call cvsm_refresh -- "$name" || rc=$?
      fi
      [ "$rc" = 0 ] && jq -n --rawfile v "$_drv_out" '{value: $v}' >"$_drv_res"
      ;;
    get_all)
      _drv_call cvsm_get_all --json || rc=$?
      if [ "$rc" = 0 ]; then
        [ ! -s "$_drv_err" ] || cat "$_drv_err" >&2
        if [ "$CVSM_STALE" = 1 ]; then
          _drv_reply "$id" "$_drv_out" '{values: ., stale: true}'
        else
          _drv_reply "$id" "$_drv_out" '{values: .}'
        fi
        : >"$_drv_out"
        return
      fi
      ;;
    inject)
      overwrite=$(jq -r '.overwrite // false' <<<"$args")
      if [ "$overwrite" = true ]; then
        _drv_call cvsm_inject --print --overwrite || rc=$?
      else
        _drv_call cvsm_inject --print || rc=$?
      fi
      [ "$rc" = 0 ] && jq -n --rawfile v "$_drv_out" '{names: ($v | split("\n") | map(select(. != "")) | sort)}' >"$_drv_res"
      ;;
    clear_cache)
      _drv_call cvsm_clear_cache || rc=$?
      [ "$rc" = 0 ] && echo '{}' >"$_drv_res"
      ;;
    describe)
      _drv_call cvsm_describe || rc=$?
      [ "$rc" = 0 ] && jq -n --rawfile v "$_drv_out" '{text: $v}' >"$_drv_res"
      ;;
  esac
  if [ "$rc" = 0 ]; then
    [ ! -s "$_drv_err" ] || cat "$_drv_err" >&2
    _drv_reply "$id"
  else
    _drv_sdk_fail "$id" "$rc"
  fi
  : >"$_drv_out"
  : >"$_drv_res"
}

while IFS= read -r _drv_line || [ -n "$_drv_line" ]; do
  [ -n "${_drv_line//[[:space:]]/}" ] || continue
  _drv_handle "$_drv_line"
done
exit 0
