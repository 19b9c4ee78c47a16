#!/usr/bin/env bash
# driver.sh - the conformance driver of the cvsm shell SDK (conformance/PROTOCOL.md).
#
# It reads one JSON request per line on stdin and writes one JSON response per line on stdout.
# It sources cvsm.sh once and calls the cvsm_* functions in its own shell process, so inject,
# set_env and get_env all act on this process's environment. Exit codes map to error kinds
# (README.md, "Errors"); the status and retry_after come from the documented message format.
#
# A "client" is a snapshot taken at new_client: the explicit options, then the CVSM_* variables of
# this process at that moment, plus a fresh private cache directory (CVSM_CACHE_DIR). Every later
# call runs with exactly that snapshot, so set_env after new_client does not change the client,
# just as it would not change a constructed client in the other languages.
set -euo pipefail
umask 077

_drv_here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck disable=SC1091 # checked on its own by make test
. "$_drv_here/../cvsm.sh"

_drv_tmp=$(mktemp -d "${TMPDIR:-/tmp}/cvsm-driver.XXXXXX")
trap 'rm -rf -- "$_drv_tmp"' EXIT
_drv_out=$_drv_tmp/out
_drv_err=$_drv_tmp/err
_drv_res=$_drv_tmp/result

_drv_vars=(TOKEN BASE_URL TEAM ENVIRONMENT CACHE_TTL TIMEOUT MAX_RETRIES)
_drv_has_client=0
_drv_clients=0
declare -A _drv_c=()

# _drv_reply ID: writes the success response for request ID with the result object in $_drv_res.
_drv_reply() {
  jq -c --argjson id "$1" '{id: $id, ok: true, result: .}' <"$_drv_res"
}

# _drv_fail ID KIND MESSAGE [STATUS] [RETRY_AFTER]: writes a failure response.
_drv_fail() {
  jq -nc --argjson id "$1" --arg kind "$2" --arg msg "$3" --arg st "${4-}" --arg ra "${5-}" \
    '{id: $id, ok: false, error: {kind: $kind, message: $msg,
      status: (if $st == "" then null else ($st | tonumber) end),
      retry_after: (if $ra == "" then null else ($ra | tonumber) end)}}'
}

# _drv_sdk_fail ID RC: turns the exit code RC and the "cvsm: ..." line on stderr into a failure.
_drv_sdk_fail() {
  local id=$1 rc=$2 kind msg st='' ra=''
  case $rc in
    2) kind=configuration ;;
    3) kind=authentication ;;
    4) kind=permission_denied ;;
    5) kind=not_found ;;
    6) kind=rate_limited ;;
    7) kind=api ;;
    8) kind=network ;;
    *) kind=internal ;;
  esac
  msg=$(grep -v '^cvsm: warning: ' "$_drv_err" | grep '^cvsm: ' | tail -n 1 || true)
  msg=${msg#cvsm: }
  [ -n "$msg" ] || msg="exit code $rc with no message: $(head -c 500 "$_drv_err")"
  if [[ $msg =~ ^HTTP\ ([0-9]{3}) ]]; then st=${BASH_REMATCH[1]}; fi
  if [[ $msg =~ \(retry\ after\ ([0-9]+)s\)( \(after [0-9]+ attempts\))?$ ]]; then ra=${BASH_REMATCH[1]}; fi
  cat "$_drv_err" >&2
  _drv_fail "$id" "$kind" "$msg" "$st" "$ra"
}

# _drv_call FUNCTION ARGS...: runs a cvsm_* function with the current client's configuration,
# stdout to $_drv_out and stderr to $_drv_err; returns its exit code.
_drv_call() {
  local rc=0
  CVSM_TOKEN=${_drv_c[TOKEN]-} CVSM_BASE_URL=${_drv_c[BASE_URL]-} CVSM_TEAM=${_drv_c[TEAM]-} \
    CVSM_ENVIRONMENT=${_drv_c[ENVIRONMENT]-} CVSM_CACHE_TTL=${_drv_c[CACHE_TTL]-} \
    CVSM_TIMEOUT=${_drv_c[TIMEOUT]-} CVSM_MAX_RETRIES=${_drv_c[MAX_RETRIES]-} \
    CVSM_CACHE_DIR=${_drv_c[CACHE_DIR]-} "$@" >"$_drv_out" 2>"$_drv_err" || rc=$?
  return "$rc"
}

# _drv_parse_sh FILE: reads cvsm_get_all output (NAME='...' lines in the documented quoting, and
# "#" comment lines) without eval, and writes the JSON object name -> value to $_drv_res.
_drv_parse_sh() {
  local rest name val pairs=$_drv_tmp/pairs
  rest=$(cat "$1"; printf x)
  rest=${rest%x}
  : >"$pairs"
  while [ -n "$rest" ]; do
    if [[ $rest == '#'* ]]; then
      if [[ $rest == *$'\n'* ]]; then rest=${rest#*$'\n'}; else rest=''; fi
      continue
    fi
    if ! [[ $rest =~ ^([A-Za-z_][A-Za-z0-9_]*)= ]]; then
      echo "driver: cannot parse cvsm_get_all output near: ${rest:0:40}" >&2
      return 1
    fi
    name=${BASH_REMATCH[1]}
    rest=${rest#*=}
    val=''
    while :; do
      case $rest in
        "'"*)
          rest=${rest#\'}
          if [[ $rest != *"'"* ]]; then
            echo "driver: unterminated quote in cvsm_get_all output" >&2
            return 1
          fi
          val+=${rest%%\'*}
          rest=${rest#*\'}
          ;;
        "\\'"*)
          val+="'"
          rest=${rest#??}
          ;;
        *) break ;;
      esac
    done
    case $rest in
      $'\n'*) rest=${rest#?} ;;
      '') ;;
      *)
        echo "driver: unexpected text after the value of $name" >&2
        return 1
        ;;
    esac
    printf '%s\0%s\0' "$name" "$val" >>"$pairs"
  done
  # The stream ends with "END": jq 1.6 loses a NUL that is the very last byte of raw input. (Raw
  # input is read with --rawfile throughout: jq 1.6's -R splits multi-byte characters at 4 KiB.)
  printf 'END' >>"$pairs"
  jq -n --rawfile raw "$pairs" '$raw | split("\u0000") | .[:-1]
    | [range(0; length; 2) as $i | {key: .[$i], value: .[$i + 1]}] | from_entries' >"$_drv_res"
}

# _drv_new_client ID ARGS: snapshots the configuration and checks it (cvsm_check_config).
_drv_new_client() {
  local id=$1 args=$2 v key opt rc=0
  _drv_has_client=0
  _drv_c=()
  for v in "${_drv_vars[@]}"; do
    key=CVSM_$v
    _drv_c[$v]=${!key-}
  done
  # Explicit options win over the environment: one "KEY<TAB>value" line per option present.
  while IFS=$'\t' read -r opt v; do
    case $opt in
      token) _drv_c[TOKEN]=$v ;;
      base_url) _drv_c[BASE_URL]=$v ;;
      team) _drv_c[TEAM]=$v ;;
      environment) _drv_c[ENVIRONMENT]=$v ;;
      cache_ttl) _drv_c[CACHE_TTL]=$v ;;
      timeout) _drv_c[TIMEOUT]=$v ;;
      max_retries) _drv_c[MAX_RETRIES]=$v ;;
    esac
  done < <(jq -r '(.options // {}) | to_entries[] | select(.value != null)
    | "\(.key)\t\(.value | if type == "string" then . else tojson end)"' <<<"$args")
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
  printf 'END' >>"$pairs"
  jq -n --rawfile raw "$pairs" '$raw | split("\u0000") | .[:-1] | [range(0; length; 2) as $i
    | {key: .[$i], value: (.[$i + 1] | if startswith("s") then .[1:] else null end)}]
    | {values: from_entries}' >"$_drv_res"
  _drv_reply "$id"
}

# _drv_handle LINE: answers one request.
_drv_handle() {
  local line=$1 id op args rc=0 overwrite
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
    shutdown)
      echo '{}' >"$_drv_res"
      _drv_reply "$id"
      exit 0
      ;;
    get | get_all | inject | clear_cache | describe) ;;
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
      _drv_call cvsm_get -- "$(jq -r '.name' <<<"$args")" || rc=$?
      [ "$rc" = 0 ] && jq -n --rawfile v "$_drv_out" '{value: $v}' >"$_drv_res"
      ;;
    get_all)
      _drv_call cvsm_get_all || rc=$?
      if [ "$rc" = 0 ]; then
        if ! _drv_parse_sh "$_drv_out"; then
          _drv_fail "$id" internal "cvsm_get_all printed output that does not parse"
          return
        fi
        jq -c '{values: .}' <"$_drv_res" >"$_drv_res.2" && mv "$_drv_res.2" "$_drv_res"
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
}

while IFS= read -r _drv_line || [ -n "$_drv_line" ]; do
  [ -n "${_drv_line//[[:space:]]/}" ] || continue
  _drv_handle "$_drv_line"
done
exit 0
