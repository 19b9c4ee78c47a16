# shellcheck shell=bash
# cvsm.sh - the cvsm shell SDK: `source` it from bash (4+) or zsh (5+) to read team secrets.
#
# Public functions (see README.md for the full reference):
#   cvsm_get [OPTIONS] NAME          print one secret value, exactly, with no newline added
#   cvsm_get_all [OPTIONS] [--json]  print NAME='value' lines safe to `eval` (or one JSON object)
#   cvsm_inject [OPTIONS] [--overwrite] [--print]   export every secret into the calling shell
#   cvsm_clear_cache                 empty the local value cache
#   cvsm_describe [OPTIONS] [--json] print the effective configuration (never the token)
#   cvsm_check_config [OPTIONS]      validate the configuration without touching the network
#
# Configuration comes from CVSM_TOKEN, CVSM_BASE_URL, CVSM_TEAM, CVSM_ENVIRONMENT, CVSM_CACHE_TTL,
# CVSM_TIMEOUT, CVSM_MAX_RETRIES and CVSM_CACHE_DIR; options (--environment, --team, --base-url,
# --cache-ttl, --timeout, --max-retries) win over the variables.
#
# Exit codes: 0 ok, 2 configuration or usage, 3 authentication, 4 permission denied, 5 not found,
# 6 rate limited, 7 API error, 8 network error. A failure prints exactly one line on stderr:
# "cvsm: <message>". The functions only ever `return`: they never exit the caller's shell, work
# under `set -euo pipefail`, keep all their state in `local` variables, and switch xtrace off
# while they run so that neither the token nor a value shows up in a `set -x` trace.
#
# Needs curl and jq. Every name this file defines starts with cvsm_ (public) or _cvsm_ (private).

# cvsm_get prints the value of secret NAME on stdout exactly as stored (no newline added).
cvsm_get() {
  { local _cvsm_xt="$-" _cvsm_rc=0; set +x; } 2>/dev/null
  _cvsm_main get "$@" || _cvsm_rc=$?
  case $_cvsm_xt in *x*) set -x ;; esac
  return "$_cvsm_rc"
}

# cvsm_get_all prints every secret of the environment as NAME='value' lines (shell-quoted, sorted by
# name, ready for `eval`), or with --json one JSON object of name -> value.
cvsm_get_all() {
  { local _cvsm_xt="$-" _cvsm_rc=0; set +x; } 2>/dev/null
  _cvsm_main get_all "$@" || _cvsm_rc=$?
  case $_cvsm_xt in *x*) set -x ;; esac
  return "$_cvsm_rc"
}

# cvsm_inject exports every secret of the environment into the calling shell, keeping variables
# that are already set unless --overwrite is given; with --print it lists the names it set.
cvsm_inject() {
  { local _cvsm_xt="$-" _cvsm_rc=0; set +x; } 2>/dev/null
  _cvsm_main inject "$@" || _cvsm_rc=$?
  case $_cvsm_xt in *x*) set -x ;; esac
  return "$_cvsm_rc"
}

# cvsm_clear_cache empties the local value cache, so the next call asks the server again.
cvsm_clear_cache() {
  { local _cvsm_xt="$-" _cvsm_rc=0; set +x; } 2>/dev/null
  _cvsm_main clear_cache "$@" || _cvsm_rc=$?
  case $_cvsm_xt in *x*) set -x ;; esac
  return "$_cvsm_rc"
}

# cvsm_describe prints the effective configuration as key=value lines (or --json), never the token.
cvsm_describe() {
  { local _cvsm_xt="$-" _cvsm_rc=0; set +x; } 2>/dev/null
  _cvsm_main describe "$@" || _cvsm_rc=$?
  case $_cvsm_xt in *x*) set -x ;; esac
  return "$_cvsm_rc"
}

# cvsm_check_config returns 0 when the configuration is complete and valid, 2 (with the reason on
# stderr) otherwise. It makes no request.
cvsm_check_config() {
  { local _cvsm_xt="$-" _cvsm_rc=0; set +x; } 2>/dev/null
  _cvsm_main check "$@" || _cvsm_rc=$?
  case $_cvsm_xt in *x*) set -x ;; esac
  return "$_cvsm_rc"
}

# _cvsm_main runs one operation. Under zsh it switches to ksh emulation for this call only, and
# loads zsh/datetime for the clock, unloading it again if the caller had not loaded it.
_cvsm_main() {
  local _cvsm_zdt=0 _cvsm_mrc=0
  if [ -n "${ZSH_VERSION:-}" ]; then
    emulate -L ksh
    setopt typeset_silent no_nomatch 2>/dev/null
    if ! zmodload -e zsh/datetime && zmodload zsh/datetime 2>/dev/null; then
      _cvsm_zdt=1
    fi
  fi
  _cvsm_run "$@" || _cvsm_mrc=$?
  if [ "$_cvsm_zdt" = 1 ]; then
    zmodload -u zsh/datetime 2>/dev/null
  fi
  return "$_cvsm_mrc"
}

# _cvsm_run runs one operation. It declares every variable the private helpers share (they are
# dynamically scoped locals, so nothing leaks into the caller's shell).
_cvsm_run() {
  local _cvsm_op="$1"
  shift
  local _cvsm_token='' _cvsm_base='' _cvsm_team='' _cvsm_env='' _cvsm_ttl='' _cvsm_timeout='' \
    _cvsm_retries='' _cvsm_root='' _cvsm_root_err='' _cvsm_name='' _cvsm_nargs=0 _cvsm_json=0 \
    _cvsm_overwrite=0 _cvsm_print=0 _cvsm_o_base='' _cvsm_o_team='' _cvsm_o_env='' _cvsm_o_ttl='' \
    _cvsm_o_timeout='' _cvsm_o_retries='' _cvsm_now=0 _cvsm_h='' _cvsm_enc='' _cvsm_tid='' \
    _cvsm_result='' _cvsm_values='' _cvsm_names=''
  _cvsm_parse_args "$@" || return
  if [ "$_cvsm_op" = clear_cache ]; then
    _cvsm_op_clear_cache
    return
  fi
  _cvsm_load_config || return
  case $_cvsm_op in
    check) return 0 ;;
    describe) _cvsm_op_describe ;;
    get) _cvsm_op_get ;;
    get_all) _cvsm_op_get_all ;;
    inject) _cvsm_op_inject ;;
  esac
}

# _cvsm_fail prints "cvsm: MESSAGE" as one line on stderr (token redacted, control characters
# replaced) and returns CODE.
_cvsm_fail() {
  local code="$1" msg="$2"
  if [ -n "${_cvsm_token-}" ]; then
    msg=${msg//"$_cvsm_token"/[redacted]}
  fi
  msg=${msg//[[:cntrl:]]/ }
  printf 'cvsm: %s\n' "$msg" >&2
  return "$code"
}

# _cvsm_warn prints "cvsm: warning: MESSAGE" on stderr; the call still succeeds.
_cvsm_warn() {
  local msg="$1"
  msg=${msg//[[:cntrl:]]/ }
  printf 'cvsm: warning: %s\n' "$msg" >&2
}

# _cvsm_parse_args reads the options and arguments of one public function into _cvsm_* locals.
# An explicit option is stored with an "x" prefix so that an empty value is told from no option.
_cvsm_parse_args() {
  local a v
  while [ $# -gt 0 ]; do
    a=$1
    shift
    v=''
    case $a in
      --environment=* | --team=* | --base-url=* | --cache-ttl=* | --timeout=* | --max-retries=*)
        v=${a#*=}
        a=${a%%=*}
        ;;
      -e | --environment | --team | --base-url | --cache-ttl | --timeout | --max-retries)
        if [ $# -eq 0 ]; then
          _cvsm_fail 2 "option $a needs a value"
          return
        fi
        v=$1
        shift
        ;;
    esac
    case $a in
      -e | --environment | --team | --base-url | --cache-ttl | --timeout | --max-retries)
        if [ "$_cvsm_op" = clear_cache ]; then
          _cvsm_fail 2 "cvsm_clear_cache takes no options"
          return
        fi
        ;;
    esac
    case $a in
      -e | --environment) _cvsm_o_env="x$v" ;;
      --team) _cvsm_o_team="x$v" ;;
      --base-url) _cvsm_o_base="x$v" ;;
      --cache-ttl) _cvsm_o_ttl="x$v" ;;
      --timeout) _cvsm_o_timeout="x$v" ;;
      --max-retries) _cvsm_o_retries="x$v" ;;
      --json)
        case $_cvsm_op in
          get_all | describe) _cvsm_json=1 ;;
          *) _cvsm_fail 2 "unknown option --json"; return ;;
        esac
        ;;
      --overwrite | --print)
        if [ "$_cvsm_op" != inject ]; then
          _cvsm_fail 2 "unknown option $a"
          return
        fi
        if [ "$a" = --overwrite ]; then _cvsm_overwrite=1; else _cvsm_print=1; fi
        ;;
      --)
        while [ $# -gt 0 ]; do
          _cvsm_nargs=$((_cvsm_nargs + 1))
          _cvsm_name=$1
          shift
        done
        ;;
      -?*)
        _cvsm_fail 2 "unknown option $a"
        return
        ;;
      *)
        _cvsm_nargs=$((_cvsm_nargs + 1))
        _cvsm_name=$a
        ;;
    esac
  done
  if [ "$_cvsm_op" = get ]; then
    if [ "$_cvsm_nargs" -ne 1 ]; then
      _cvsm_fail 2 "usage: cvsm_get [OPTIONS] NAME"
      return
    fi
  elif [ "$_cvsm_nargs" -ne 0 ]; then
    _cvsm_fail 2 "unexpected argument \"$_cvsm_name\""
    return
  fi
}

# _cvsm_pick VAR OPTION: sets _cvsm_result to the explicit option when given, else to the
# environment variable VAR (empty counts as unset), and _cvsm_enc to where it came from.
_cvsm_pick() {
  if [ -n "$2" ]; then
    _cvsm_result=${2#x}
    _cvsm_enc=$3
  else
    eval "_cvsm_result=\${$1:-}"
    _cvsm_enc=$1
  fi
}

# _cvsm_uint VALUE: succeeds when VALUE is a non-negative integer of at most 9 digits and sets
# _cvsm_result to it without leading zeros.
_cvsm_uint() {
  local v="$1"
  case $v in '' | *[!0-9]*) return 1 ;; esac
  while :; do
    case $v in 0?*) v=${v#0} ;; *) break ;; esac
  done
  [ ${#v} -le 9 ] || return 1
  _cvsm_result=$v
}

# _cvsm_load_config fills _cvsm_token, _cvsm_base, _cvsm_team, _cvsm_env, _cvsm_ttl, _cvsm_timeout
# and _cvsm_retries from the options and the CVSM_* variables, or fails with code 2.
_cvsm_load_config() {
  local v src
  command -v curl >/dev/null 2>&1 || { _cvsm_fail 2 "curl is required but was not found on PATH"; return; }
  command -v jq >/dev/null 2>&1 || { _cvsm_fail 2 "jq is required but was not found on PATH"; return; }

  _cvsm_token=${CVSM_TOKEN:-}
  if [ -z "$_cvsm_token" ]; then
    _cvsm_fail 2 "CVSM_TOKEN is not set"
    return
  fi
  case $_cvsm_token in
    *[![:graph:]]* | *\"* | *\\*)
      _cvsm_token=''
      _cvsm_fail 2 "CVSM_TOKEN contains characters a token cannot have"
      return
      ;;
  esac

  _cvsm_pick CVSM_BASE_URL "$_cvsm_o_base" --base-url
  v=$_cvsm_result src=$_cvsm_enc
  if [ -z "$v" ]; then
    _cvsm_fail 2 "$src is not set"
    return
  fi
  while :; do
    case $v in */) v=${v%/} ;; *) break ;; esac
  done
  case $v in
    *[![:graph:]]*) _cvsm_fail 2 "$src must not contain spaces or control characters"; return ;;
    http://?* | https://?*) ;;
    *) _cvsm_fail 2 "$src must start with http:// or https://"; return ;;
  esac
  _cvsm_base=$v

  _cvsm_pick CVSM_TEAM "$_cvsm_o_team" --team
  v=$_cvsm_result src=$_cvsm_enc
  if [ -z "$v" ]; then
    _cvsm_fail 2 "$src is not set"
    return
  fi
  case $v in *[![:graph:]]*) _cvsm_fail 2 "$src must not contain spaces or control characters"; return ;; esac
  _cvsm_team=$v

  _cvsm_pick CVSM_ENVIRONMENT "$_cvsm_o_env" --environment
  v=${_cvsm_result:-production} src=$_cvsm_enc
  case $v in *[![:graph:]]*) _cvsm_fail 2 "$src must not contain spaces or control characters"; return ;; esac
  _cvsm_env=$v

  _cvsm_pick CVSM_CACHE_TTL "$_cvsm_o_ttl" --cache-ttl
  v=${_cvsm_result:-30} src=$_cvsm_enc
  _cvsm_uint "$v" || { _cvsm_fail 2 "$src must be a non-negative integer (seconds)"; return; }
  _cvsm_ttl=$_cvsm_result

  _cvsm_pick CVSM_MAX_RETRIES "$_cvsm_o_retries" --max-retries
  v=${_cvsm_result:-2} src=$_cvsm_enc
  _cvsm_uint "$v" || { _cvsm_fail 2 "$src must be a non-negative integer"; return; }
  _cvsm_retries=$_cvsm_result

  _cvsm_pick CVSM_TIMEOUT "$_cvsm_o_timeout" --timeout
  v=${_cvsm_result:-10} src=$_cvsm_enc
  case $v in
    '' | *[!0-9.]* | .* | *. | *.*.*) _cvsm_fail 2 "$src must be a positive number of seconds"; return ;;
  esac
  while :; do
    case $v in 0[0-9]*) v=${v#0} ;; *) break ;; esac
  done
  case $v in *[1-9]*) ;; *) _cvsm_fail 2 "$src must be a positive number of seconds"; return ;; esac
  case $v in *.*) while :; do case $v in *.*0) v=${v%0} ;; *.) v=${v%.} && break ;; *) break ;; esac; done ;; esac
  _cvsm_timeout=$v
  _cvsm_result=''
  _cvsm_enc=''
}

# _cvsm_redacted_base prints the base URL with any user:password part hidden.
_cvsm_redacted_base() {
  local scheme rest host
  scheme=${_cvsm_base%%://*}
  rest=${_cvsm_base#*://}
  host=${rest%%/*}
  case $host in
    *@*) printf '%s://***@%s%s' "$scheme" "${host##*@}" "${rest#"$host"}" ;;
    *) printf '%s' "$_cvsm_base" ;;
  esac
}

# _cvsm_cache_path prints the cache directory: CVSM_CACHE_DIR, else
# ${XDG_RUNTIME_DIR:-${TMPDIR:-/tmp}}/cvsm-$UID.
_cvsm_cache_path() {
  local dir uid
  if [ -n "${CVSM_CACHE_DIR:-}" ]; then
    printf '%s' "$CVSM_CACHE_DIR"
    return
  fi
  uid=${UID:-}
  [ -n "$uid" ] || uid=$(command id -u)
  dir=${XDG_RUNTIME_DIR:-${TMPDIR:-/tmp}}
  printf '%s/cvsm-%s' "${dir%/}" "$uid"
}

# _cvsm_cache_root sets _cvsm_root to the private cache directory, creating it with mode 0700 when
# missing. It refuses (code 2, reason in _cvsm_root_err) a symlink, a directory owned by someone
# else, or one that others can read or write. With "quiet" it prints nothing.
_cvsm_cache_root() {
  local dir line
  [ -z "$_cvsm_root" ] || return 0
  [ -z "$_cvsm_root_err" ] || { [ "${1-}" = quiet ] && return 2; _cvsm_fail 2 "$_cvsm_root_err"; return; }
  dir=$(_cvsm_cache_path)
  if [ ! -e "$dir" ] && [ ! -L "$dir" ]; then
    (umask 077 && command mkdir -p -- "$dir") 2>/dev/null
  fi
  if [ -L "$dir" ] || [ ! -d "$dir" ] || [ ! -O "$dir" ]; then
    _cvsm_root_err="cache directory $dir is not a directory owned by you; remove it or set CVSM_CACHE_DIR"
  else
    line=$(LC_ALL=C command ls -ld -- "$dir" 2>/dev/null)
    case ${line%% *} in
      drwx------ | drwx------.) _cvsm_root=$dir && return 0 ;;
    esac
    _cvsm_root_err="cache directory $dir must have mode 0700 (chmod 700 it) or set CVSM_CACHE_DIR"
  fi
  [ "${1-}" = quiet ] && return 2
  _cvsm_fail 2 "$_cvsm_root_err"
}

# _cvsm_hash STRING sets _cvsm_h to the hex SHA-256 of STRING (cksum where no SHA-256 tool exists).
# The string travels on a pipe, never on a command line.
_cvsm_hash() {
  local out
  if command -v sha256sum >/dev/null 2>&1; then
    out=$(printf '%s' "$1" | command sha256sum)
  elif command -v shasum >/dev/null 2>&1; then
    out=$(printf '%s' "$1" | command shasum -a 256)
  elif command -v openssl >/dev/null 2>&1; then
    out=$(printf '%s' "$1" | command openssl dgst -sha256 -r)
  else
    out=$(printf '%s' "$1" | command cksum)
  fi
  _cvsm_h=${out%%[!0-9a-fA-F]*}
}

# _cvsm_now_ms sets _cvsm_now to the current time in milliseconds since the epoch.
_cvsm_now_ms() {
  local t s f
  t=${EPOCHREALTIME-}
  case $t in
    *[.,]*)
      s=${t%%[.,]*}
      f=${t#*[.,]}000
      f=${f%"${f#???}"}
      _cvsm_now=$((s * 1000 + 1$f - 1000))
      ;;
    *)
      t=$(command date +%s%N 2>/dev/null)
      case $t in
        *[!0-9]* | '' | ?????????? | ?????????) _cvsm_now=$(($(command date +%s) * 1000)) ;;
        *) _cvsm_now=$((t / 1000000)) ;;
      esac
      ;;
  esac
}

# _cvsm_key KIND [NAME]: sets _cvsm_h to the cache file name of an entry, a hash of base URL, team,
# token, environment, kind and name (so another token never sees these entries).
_cvsm_key() {
  _cvsm_hash "$_cvsm_base"$'\n'"$_cvsm_team"$'\n'"$_cvsm_token"$'\n'"$_cvsm_env"$'\n'"$1"$'\n'"${2-}"
}

# _cvsm_cache_put FILE CONTENT writes CONTENT to FILE atomically with mode 0600 (best effort; a
# unique temporary file, so concurrent subshells of one shell never write into the same one).
_cvsm_cache_put() {
  (
    umask 077
    [ -d "${1%/*}" ] || command mkdir -p -- "${1%/*}" || exit 1
    t=$(command mktemp "$1.XXXXXX") || exit 1
    if printf '%s' "$2" >|"$t" && command mv -f -- "$t" "$1"; then exit 0; fi
    command rm -f -- "$t"
  ) 2>/dev/null
  return 0
}

# _cvsm_cache_drop_all removes every cached value and team id (after an authentication error).
_cvsm_cache_drop_all() {
  _cvsm_cache_root quiet || return 0
  command rm -rf -- "$_cvsm_root/values" "$_cvsm_root/teams" 2>/dev/null
  return 0
}

# _cvsm_op_clear_cache empties the value cache; team ids (not secrets) are kept.
_cvsm_op_clear_cache() {
  local dir
  dir=$(_cvsm_cache_path)
  [ -e "$dir" ] || [ -L "$dir" ] || return 0
  _cvsm_cache_root || return
  command rm -rf -- "$_cvsm_root/values" || { _cvsm_fail 2 "cannot empty $_cvsm_root/values"; return; }
}

# _cvsm_urlenc STRING sets _cvsm_enc to STRING percent-encoded for a URL query or path segment.
_cvsm_urlenc() {
  case $1 in
    *[!A-Za-z0-9._~-]*) _cvsm_enc=$(command jq -rn --arg s "$1" '$s | @uri') ;;
    *) _cvsm_enc=$1 ;;
  esac
}

# _cvsm_backoff ATTEMPT sleeps a random time between 0 and 0.1 * 2**ATTEMPT seconds (full jitter).
_cvsm_backoff() {
  local e="$1" max ms frac
  [ "$e" -le 10 ] || e=10
  max=$((100 * (1 << e)))
  _cvsm_now_ms
  ms=$(((((RANDOM << 15) ^ RANDOM) ^ (_cvsm_now % 1000000)) % (max + 1)))
  frac=00$((ms % 1000))
  frac=${frac#"${frac%???}"}
  command sleep "$((ms / 1000)).$frac"
}

# _cvsm_curl_reason CODE sets _cvsm_enc to a short description of a curl exit code.
_cvsm_curl_reason() {
  case $1 in
    5 | 6) _cvsm_enc="could not resolve the server's host name" ;;
    7) _cvsm_enc="could not connect to the server" ;;
    28) _cvsm_enc="timed out after ${_cvsm_timeout}s" ;;
    52) _cvsm_enc="the server closed the connection without answering" ;;
    18 | 55 | 56) _cvsm_enc="the connection broke while talking to the server" ;;
    1 | 8) _cvsm_enc="the server did not answer with valid HTTP" ;;
    35 | 51 | 53 | 54 | 58 | 59 | 60 | 77 | 80 | 82 | 83 | 90 | 91) _cvsm_enc="TLS error (curl exit $1)" ;;
    *) _cvsm_enc="transfer failed (curl exit $1)" ;;
  esac
}

# _cvsm_request PATH FILTER [JQ ARGS...] GETs PATH under the base URL and runs the jq FILTER (raw
# output) over a 2xx body into _cvsm_result. Network errors, 502/503/504 and unreadable bodies are
# retried up to _cvsm_retries times with jittered backoff; 4xx never are. On failure it prints the
# error and returns its exit code. The token goes to curl on stdin, never on its command line.
_cvsm_request() {
  local rpath="$1" filter="$2" url out rc st hdrs body attempt=0 code retryable msg err ra tok
  shift 2
  url=$_cvsm_base$rpath
  url=${url//\\/\\\\}
  url=${url//\"/\\\"}
  tok=$_cvsm_token
  while :; do
    out=$(printf 'url = "%s"\nheader = "Authorization: Bearer %s"\nheader = "Accept: application/json"\nuser-agent = "cvsm-shell/0.1.0"\nmax-time = %s\nproto = "=http,https"\ngloboff\n' \
      "$url" "$tok" "$_cvsm_timeout" | command curl -q -sS -D - -K - 2>/dev/null
    printf 'x%s' "$?")
    rc=${out##*x}
    out=${out%x*}
    code=0 retryable=0 ra='' msg='' st=''
    if [ "$rc" != 0 ]; then
      code=8 retryable=1
      _cvsm_curl_reason "$rc"
      msg="network error: $_cvsm_enc"
    else
      body=$out
      while :; do
        hdrs=${body%%$'\r\n\r\n'*}
        if [ "$hdrs" = "$body" ]; then body=''; else body=${body#*$'\r\n\r\n'}; fi
        st=${hdrs#HTTP/* }
        st=${st%%[!0-9]*}
        case $st in 1[0-9][0-9]) continue ;; esac
        break
      done
      case $st in
        2[0-9][0-9])
          if _cvsm_result=$(printf '%s' "$body" | command jq -r "$filter" "$@" 2>/dev/null); then
            return 0
          fi
          code=8 retryable=1 msg="network error: unreadable response from the server (HTTP $st)"
          ;;
        [1-5][0-9][0-9])
          case $st in
            401) code=3 ;;
            403) code=4 ;;
            404) code=5 ;;
            429) code=6 ;;
            502 | 503 | 504) code=7 retryable=1 ;;
            *) code=7 ;;
          esac
          err=$(printf '%s' "$body" | command jq -r 'if type == "object" and (.error | type) == "string" then .error else empty end' 2>/dev/null) || err=''
          msg="HTTP $st"
          [ -z "$err" ] || msg="$msg: ${err:0:300}"
          if [ "$code" = 6 ]; then
            ra=${hdrs#*$'\n'[Rr][Ee][Tt][Rr][Yy]-[Aa][Ff][Tt][Ee][Rr]:}
            if [ "$ra" != "$hdrs" ]; then
              ra=${ra%%$'\r'*}
              ra=${ra// /}
              _cvsm_uint "$ra" && msg="$msg (retry after ${_cvsm_result}s)"
              _cvsm_result=''
            fi
          fi
          ;;
        *)
          code=8 retryable=1 msg="network error: the server did not answer with valid HTTP"
          ;;
      esac
    fi
    if [ "$retryable" = 1 ] && [ "$attempt" -lt "$_cvsm_retries" ]; then
      _cvsm_backoff "$attempt"
      attempt=$((attempt + 1))
      continue
    fi
    [ "$attempt" -eq 0 ] || msg="$msg (after $((attempt + 1)) attempts)"
    [ "$code" != 3 ] || _cvsm_cache_drop_all
    _cvsm_fail "$code" "$msg"
    return
  done
}

# _cvsm_resolve_team sets _cvsm_tid: the configured team when it is a UUID, else the id of the
# caller's team with that slug (GET /teams), remembered in the cache directory for 10 minutes.
_cvsm_resolve_team() {
  local f='' id
  case $_cvsm_team in
    [0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F]-[0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F]-[0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F]-[0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F]-[0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F])
      _cvsm_tid=$_cvsm_team
      return 0
      ;;
  esac
  if _cvsm_cache_root quiet; then
    _cvsm_hash "$_cvsm_base"$'\n'"$_cvsm_token"$'\n'"$_cvsm_team"
    f=$_cvsm_root/teams/$_cvsm_h
    if [ -f "$f" ]; then
      _cvsm_now_ms
      if id=$(command jq -r --argjson now "$_cvsm_now" 'if (.exp | type) == "number" and .exp > $now and (.id | type) == "string" then .id else error("stale") end' "$f" 2>/dev/null); then
        case $id in
          '' | *[!0-9A-Za-z-]*) ;;
          *) _cvsm_tid=$id && return 0 ;;
        esac
      fi
    fi
  fi
  # shellcheck disable=SC2016 # jq variables, not shell ones
  _cvsm_request /teams '(.teams | if type == "array" then . else error("no teams") end)
      | map(select(type == "object" and .slug == $slug and (.id | type) == "string")) | (first | .id) // ""' \
    --arg slug "$_cvsm_team" || return
  id=$_cvsm_result
  if [ -z "$id" ]; then
    _cvsm_fail 2 "team \"$_cvsm_team\" matches none of your teams (CVSM_TEAM takes a team id or slug)"
    return
  fi
  case $id in
    *[!0-9A-Za-z-]*) _cvsm_fail 8 "network error: unreadable team id from the server"; return ;;
  esac
  _cvsm_tid=$id
  if [ -n "$f" ]; then
    _cvsm_now_ms
    _cvsm_cache_put "$f" "{\"exp\":$((_cvsm_now + 600000)),\"id\":\"$id\"}"
  fi
}

# _cvsm_op_get prints one value: from the cache when fresh (its own entry, or a cached get_all of
# the same environment), else by listing with search=NAME, taking the exact name and fetching it.
_cvsm_op_get() {
  local name="$_cvsm_name" fget='' fall='' found vjson
  if [ -z "$name" ]; then
    _cvsm_fail 2 "the secret name is empty"
    return
  fi
  if [ "$_cvsm_ttl" -gt 0 ]; then
    _cvsm_cache_root || return
    _cvsm_key get "$name"
    fget=$_cvsm_root/values/$_cvsm_h
    _cvsm_key all
    fall=$_cvsm_root/values/$_cvsm_h
    _cvsm_now_ms
    if [ -f "$fget" ]; then
      command jq -j --argjson now "$_cvsm_now" 'if (.exp | type) == "number" and .exp > $now and (.value | type) == "string" then .value else error("stale") end' "$fget" 2>/dev/null && return 0
      command rm -f -- "$fget"
    fi
    if [ -f "$fall" ]; then
      command jq -j --argjson now "$_cvsm_now" --arg n "$name" 'if (.exp | type) == "number" and .exp > $now and (.values | type) == "object" and (.values[$n] | type) == "string" then .values[$n] else error("miss") end' "$fall" 2>/dev/null && return 0
    fi
  fi
  _cvsm_resolve_team || return
  _cvsm_urlenc "$_cvsm_env"
  found=$_cvsm_enc
  _cvsm_urlenc "$name"
  # shellcheck disable=SC2016 # jq variables, not shell ones
  _cvsm_request "/teams/$_cvsm_tid/secrets?environment=$found&search=$_cvsm_enc" \
    '(.secrets | if type == "array" then . else error("no secrets") end)
      | map(select(type == "object" and (.name | type) == "string" and (.environment == null or .environment == $env))) as $s
      | ([$s[] | select(.name == $n and (.id | type) == "string") | .id] | first) as $id
      | if $id then "id:" + $id
        else ([$s[] | select((.name | ascii_downcase) == ($n | ascii_downcase)) | .name] | first) as $alt
        | if $alt then "suggest:" + $alt else "none" end
        end' \
    --arg n "$name" --arg env "$_cvsm_env" || return
  found=$_cvsm_result
  case $found in
    id:*) ;;
    suggest:*)
      _cvsm_fail 5 "secret \"$name\" not found in $_cvsm_env; did you mean \"${found#suggest:}\"?"
      return
      ;;
    *)
      _cvsm_fail 5 "secret \"$name\" not found in $_cvsm_env"
      return
      ;;
  esac
  _cvsm_urlenc "${found#id:}"
  _cvsm_request "/teams/$_cvsm_tid/secrets/$_cvsm_enc" \
    '.value | if type == "string" then tojson else error("no value") end' || return
  vjson=$_cvsm_result
  if [ -n "$fget" ]; then
    _cvsm_now_ms
    _cvsm_cache_put "$fget" "{\"exp\":$((_cvsm_now + _cvsm_ttl * 1000)),\"value\":$vjson}"
  fi
  printf '%s' "$vjson" | command jq -j .
}

# _cvsm_fetch_all sets _cvsm_values to the JSON object name -> value of the environment: from the
# cache when fresh, else from the export endpoint (format=json), then cached.
_cvsm_fetch_all() {
  local fall=''
  if [ "$_cvsm_ttl" -gt 0 ]; then
    _cvsm_cache_root || return
    _cvsm_key all
    fall=$_cvsm_root/values/$_cvsm_h
    if [ -f "$fall" ]; then
      _cvsm_now_ms
      if _cvsm_values=$(command jq -c --argjson now "$_cvsm_now" 'if (.exp | type) == "number" and .exp > $now and (.values | type) == "object" then .values else error("stale") end' "$fall" 2>/dev/null); then
        return 0
      fi
      command rm -f -- "$fall"
    fi
  fi
  _cvsm_resolve_team || return
  _cvsm_urlenc "$_cvsm_env"
  _cvsm_request "/teams/$_cvsm_tid/secrets/export?format=json&environment=$_cvsm_enc" \
    'if type == "object" and all(.[]; type == "string") then tojson else error("not an object of strings") end' || return
  _cvsm_values=$_cvsm_result
  if [ -n "$fall" ]; then
    _cvsm_now_ms
    _cvsm_cache_put "$fall" "{\"exp\":$((_cvsm_now + _cvsm_ttl * 1000)),\"values\":$_cvsm_values}"
  fi
}

# _cvsm_op_get_all prints the values as NAME='value' lines sorted by name (a name that is not a
# valid variable name becomes a "# skipped" comment line), or with --json one JSON object.
_cvsm_op_get_all() {
  _cvsm_fetch_all || return
  if [ "$_cvsm_json" = 1 ]; then
    printf '%s' "$_cvsm_values" | command jq -cS .
  else
    printf '%s' "$_cvsm_values" | command jq -r 'keys[] as $k
      | if ($k | test("^[A-Za-z_][A-Za-z0-9_]*$")) then "\($k)=\(.[$k] | @sh)"
        else "# cvsm: skipped \($k | tojson): not a valid variable name" end'
  fi
}

# _cvsm_op_inject exports the values into the calling shell (see _cvsm_inject_one) and, with
# --print, prints the names it set, one per line, sorted.
_cvsm_op_inject() {
  local _cvsm_script=''
  _cvsm_fetch_all || return
  _cvsm_script=$(printf '%s' "$_cvsm_values" | command jq -r 'keys[] as $k
      | if ($k | test("^[A-Za-z_][A-Za-z0-9_]*$")) then "_cvsm_inject_one \($k) \(.[$k] | @sh)"
        else "_cvsm_warn \("skipped \($k | tojson): not a valid variable name" | @sh)" end') || {
    _cvsm_fail 8 "network error: unreadable response from the server"
    return
  }
  _cvsm_names=''
  eval "$_cvsm_script"
  if [ "$_cvsm_print" = 1 ]; then
    printf '%s' "$_cvsm_names"
  fi
}

# _cvsm_inject_one NAME VALUE exports NAME=VALUE unless NAME is already set (and --overwrite was not
# given), is special to the shell, or is read-only; the names set are collected in _cvsm_names.
_cvsm_inject_one() {
  case $1 in
    _cvsm_* | UID | EUID | GID | EGID | PPID | USERNAME | BASHPID | BASHOPTS | SHELLOPTS | BASH_* | \
      RANDOM | SRANDOM | SECONDS | LINENO | HISTCMD | EPOCHSECONDS | EPOCHREALTIME | FUNCNAME | \
      GROUPS | DIRSTACK | PIPESTATUS | IFS | path | fpath | cdpath | manpath | mailpath | module_path | \
      psvar | argv | status | pipestatus)
      _cvsm_warn "skipped $1: special to the shell"
      return 0
      ;;
  esac
  if [ "$_cvsm_overwrite" != 1 ] && eval "[ -n \"\${$1+x}\" ]"; then
    return 0
  fi
  if export "$1=$2" 2>/dev/null; then
    _cvsm_names="$_cvsm_names$1"$'\n'
  else
    _cvsm_warn "skipped $1: the variable cannot be set (read-only?)"
  fi
  return 0
}

# _cvsm_op_describe prints the effective configuration: key=value lines, or --json with the keys
# base_url, team, environment, cache_ttl, timeout and max_retries. The token is never printed.
_cvsm_op_describe() {
  if [ "$_cvsm_json" = 1 ]; then
    command jq -nc --arg b "$(_cvsm_redacted_base)" --arg t "$_cvsm_team" --arg e "$_cvsm_env" \
      --argjson ttl "$_cvsm_ttl" --argjson to "$_cvsm_timeout" --argjson r "$_cvsm_retries" \
      '{base_url: $b, team: $t, environment: $e, cache_ttl: $ttl, timeout: $to, max_retries: $r}'
    return
  fi
  printf 'cvsm-shell/0.1.0\nbase_url=%s\nteam=%s\nenvironment=%s\ncache_ttl=%s\ntimeout=%s\nmax_retries=%s\ntoken=<hidden>\ncache_dir=%s\n' \
    "$(_cvsm_redacted_base)" "$_cvsm_team" "$_cvsm_env" "$_cvsm_ttl" "$_cvsm_timeout" \
    "$_cvsm_retries" "$(_cvsm_cache_path)"
}
