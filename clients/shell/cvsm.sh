# shellcheck shell=bash
# cvsm.sh - the cvsm shell SDK: `source` it from bash (4+) or zsh (5+) to read team secrets.
#
# Public functions (see README.md for the full reference):
#   cvsm_get [OPTIONS] NAME          print one secret value, exactly, with no newline added
#   cvsm_refresh [OPTIONS] NAME [ENVIRONMENT]  the same, read from the server now, past the cache
#   cvsm_get_all [OPTIONS] [--json]  print NAME='value' lines safe to `eval` (or one JSON object)
#   cvsm_inject [OPTIONS] [--overwrite] [--print]   export every secret into the calling shell
#   cvsm_run [OPTIONS] [--overwrite] -- CMD [ARGS...]  run CMD with every secret in its environment
#   cvsm_clear_cache                 empty the local value cache
#   cvsm_describe [OPTIONS] [--json] print the effective configuration (never the token)
#   cvsm_check_config [OPTIONS]      validate the configuration without touching the network
#   cvsm_version                     print the SDK's version
#
# Configuration comes from CVSM_TOKEN, CVSM_BASE_URL, CVSM_TEAM, CVSM_ENVIRONMENT, CVSM_CACHE_TTL,
# CVSM_TIMEOUT, CVSM_MAX_RETRIES, CVSM_CA_FILE, CVSM_CURL_CONFIG, CVSM_STALE_IF_ERROR and
# CVSM_CACHE_DIR; options (--environment, --team, --base-url, --cache-ttl, --timeout, --max-retries,
# --ca-file, --curl-config, --stale-if-error) win over the variables.
#
# Exit codes: 0 ok, 2 configuration or usage, 3 authentication, 4 permission denied, 5 not found,
# 6 rate limited, 7 API error, 8 network error, 9 decryption (a value of an end-to-end team that does
# not open). A failure prints exactly one line on stderr,
# "cvsm: <message>", and sets CVSM_ERROR_KIND, CVSM_ERROR_MESSAGE, CVSM_ERROR_STATUS,
# CVSM_ERROR_RETRY_AFTER, CVSM_ERROR_REQUEST_ID and CVSM_ERROR_SUGGESTION in the shell that ran
# the function (a success sets them all to ""). A call also sets CVSM_STALE: 1 when it served a
# kept value because refreshing it failed (stale-if-error; one "cvsm: warning: ..." line on stderr
# says so), else "". Apart from those seven, the functions keep their
# state in `local` variables; they only ever `return` (never exit the caller's shell), work under
# `set -euo pipefail`, and switch xtrace off while they run so that neither the token nor a value
# shows up in a `set -x` trace.
#
# The token of an end-to-end team carries its key after a dot (cvsm_<64 hex>.<key>): with it,
# cvsm_get, cvsm_get_all, cvsm_inject and cvsm_run read through the cvsm command (clients/go), found
# on PATH or beside this file, which opens the values; the key never goes to the server.
#
# Needs curl and jq (1.6 or newer). Every name this file defines starts with cvsm_ (public) or
# _cvsm_ (private).

# cvsm_get prints the value of secret NAME on stdout exactly as stored (no newline added).
cvsm_get() {
  { local _cvsm_xt="$-" _cvsm_rc=0; set +x; } 2>/dev/null
  _cvsm_main get "$@" || _cvsm_rc=$?
  case $_cvsm_xt in *x*) set -x ;; esac
  return "$_cvsm_rc"
}

# cvsm_refresh prints the value of secret NAME read from the server now, past the cache (one
# request), for "my database login failed: fetch the credential again once". In the configured
# environment (no ENVIRONMENT, or the same one) the cache then holds the value read, so later
# cvsm_get calls answer it; another ENVIRONMENT's value is printed and not cached. Errors are
# those of cvsm_get, but no kept value ever answers in place of one (stale-if-error does not apply).
cvsm_refresh() {
  { local _cvsm_xt="$-" _cvsm_rc=0; set +x; } 2>/dev/null
  _cvsm_main refresh "$@" || _cvsm_rc=$?
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
# that are already set unless --overwrite is given; with --print it lists the names it set. It sets
# nothing at all when a name or a value cannot go into the environment.
cvsm_inject() {
  { local _cvsm_xt="$-" _cvsm_rc=0; set +x; } 2>/dev/null
  _cvsm_main inject "$@" || _cvsm_rc=$?
  case $_cvsm_xt in *x*) set -x ;; esac
  return "$_cvsm_rc"
}

# cvsm_run runs CMD with every secret of the environment in CMD's environment only (the calling
# shell gets none of them), keeping variables that are already set unless --overwrite is given, and
# returns CMD's status (128+N when signal N killed it). CMD replaces a subshell (exec), so it is
# the process a signal for that subshell reaches.
cvsm_run() {
  { local _cvsm_xt="$-" _cvsm_rc=0; set +x; } 2>/dev/null
  _cvsm_main run "$@" || _cvsm_rc=$?
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

# cvsm_version prints the SDK's version (the one in the user agent, cvsm-shell/VERSION).
cvsm_version() {
  { local _cvsm_xt="$-" _cvsm_rc=0; set +x; } 2>/dev/null
  _cvsm_main version "$@" || _cvsm_rc=$?
  case $_cvsm_xt in *x*) set -x ;; esac
  return "$_cvsm_rc"
}

# _cvsm_main runs one operation. It empties the CVSM_ERROR_* variables first. Under zsh it switches
# to ksh emulation for this call only, and loads zsh/datetime for the clock, unloading it again if
# the caller had not loaded it; under bash it lifts the caller's noglob and failglob for the call.
# shellcheck disable=SC2034 # the CVSM_ERROR_* and CVSM_STALE variables are for the caller
_cvsm_main() {
  local _cvsm_zdt=0 _cvsm_mrc=0 _cvsm_noglob=0 _cvsm_failglob=0
  CVSM_STALE=''
  CVSM_ERROR_KIND='' CVSM_ERROR_MESSAGE='' CVSM_ERROR_STATUS='' CVSM_ERROR_RETRY_AFTER=''
  CVSM_ERROR_REQUEST_ID='' CVSM_ERROR_SUGGESTION=''
  if [ -n "${ZSH_VERSION:-}" ]; then
    emulate -L ksh
    setopt typeset_silent no_nomatch 2>/dev/null
    if ! zmodload -e zsh/datetime && zmodload zsh/datetime 2>/dev/null; then
      _cvsm_zdt=1
    fi
  else
    case $- in *f*) _cvsm_noglob=1 && set +f ;; esac
    if shopt -q failglob 2>/dev/null; then
      _cvsm_failglob=1
      shopt -u failglob
    fi
  fi
  _cvsm_run "$@" || _cvsm_mrc=$?
  if [ "$_cvsm_zdt" = 1 ]; then
    zmodload -u zsh/datetime 2>/dev/null
  fi
  [ "$_cvsm_noglob" = 0 ] || set -f
  [ "$_cvsm_failglob" = 0 ] || shopt -s failglob
  return "$_cvsm_mrc"
}

# _cvsm_run runs one operation. It declares every variable the private helpers share (they are
# dynamically scoped locals, so nothing but the CVSM_ERROR_* variables reaches the caller's shell).
_cvsm_run() {
  # The SDK's version: the only place it is written (user agent, cvsm_version, cvsm_describe).
  local _cvsm_ver=0.1.0
  # >>> generated by conformance/gen_constants.py from conformance/rules.json: do not edit >>>
  # The constants every cvsm SDK shares, as locals of _cvsm_run (lists: space-separated).
  # Change the data file and run `python -m conformance.gen_constants`.
  # shellcheck disable=SC2034  # the shell SDK does not use every shared constant
  {
    local _cvsm_r_retryable_statuses='502 503 504'  # statuses a GET is retried after (besides network errors and unreadable answers); never a 4xx, never 500
    local _cvsm_r_default_max_retries=2  # more attempts after the first, when neither option nor CVSM_MAX_RETRIES says
    local _cvsm_r_retry_backoff_base_ms=100  # full jitter: the pause before retry n (0 first) is random in [0, base * 2**n] milliseconds
    local _cvsm_r_default_timeout_seconds=10  # per attempt, covering connect, send, headers and the whole body (R1)
    local _cvsm_r_default_cache_ttl_seconds=30  # how long a value is fresh; 0 turns the cache off (R13)
    local _cvsm_r_default_stale_if_error_seconds=0  # how long past fresh a value is kept to answer a failed refresh (R14); 0 is off
    local _cvsm_r_default_environment='production'  # the environment when neither option nor CVSM_ENVIRONMENT says
    local _cvsm_r_env_token='CVSM_TOKEN'  # environment variable: the API token
    local _cvsm_r_env_base_url='CVSM_BASE_URL'  # environment variable: the API base URL, with /api/v1
    local _cvsm_r_env_team='CVSM_TEAM'  # environment variable: the team id or slug
    local _cvsm_r_env_environment='CVSM_ENVIRONMENT'  # environment variable: the environment
    local _cvsm_r_env_cache_ttl='CVSM_CACHE_TTL'  # environment variable: the cache TTL in whole seconds
    local _cvsm_r_env_timeout='CVSM_TIMEOUT'  # environment variable: the per-attempt timeout in seconds
    local _cvsm_r_env_max_retries='CVSM_MAX_RETRIES'  # environment variable: the retries after the first attempt
    local _cvsm_r_env_ca_file='CVSM_CA_FILE'  # environment variable: a PEM bundle trusted instead of the system store (R7)
    local _cvsm_r_env_stale_if_error='CVSM_STALE_IF_ERROR'  # environment variable: stale-if-error in whole seconds (R14)
    local _cvsm_r_env_live='CVSM_LIVE'  # environment variable: the live cache on or off (R16)
    local _cvsm_r_live_true_words='1 true yes on'  # CVSM_LIVE values that turn it on (any case)
    local _cvsm_r_live_false_words='0 false no off'  # CVSM_LIVE values that turn it off (any case); anything else is a configuration error
    local _cvsm_r_live_read_timeout_seconds=45  # a change stream silent this long is down (the server sends a heartbeat every 15 s)
    local _cvsm_r_live_backoff_base_ms=500  # reconnect pause: random between half and all of min(max, base * 2**attempt)
    local _cvsm_r_live_max_backoff_seconds=30  # the cap of the reconnect pause
    local _cvsm_r_live_refused_backoff_seconds=300  # the least pause after the stream is refused with a 401, 403 or 404
    local _cvsm_r_live_refused_statuses='401 403 404'  # stream answers (or end statuses) that wait the refused pause; 401 and 403 also empty the cache
    local _cvsm_r_secret_name_pattern='[A-Za-z_][A-Za-z0-9_]{0,254}'  # a valid secret name, matched whole; any other is not_found without a request (R10)
    local _cvsm_r_secret_name_max_length=255  # the longest secret name
    local _cvsm_r_variable_name_pattern='[A-Za-z_][A-Za-z0-9_]*'  # a name inject may set, matched whole (R8)
    local _cvsm_r_token_trimmed_characters=$' \t\r\n'  # trimmed from both ends of a token (R6); what is left must be visible ASCII, ! to ~
    local _cvsm_r_token_prefix='cvsm_'  # an API token's prefix; only such a token may carry a key part after a dot (R15)
    local _cvsm_r_user_agent_prefix='cvsm-'  # User-Agent is this, the SDK's name, a slash and its version (cvsm-go/<version>)
    local _cvsm_r_accept_json='application/json'  # the Accept header of every read
    local _cvsm_r_accept_event_stream='text/event-stream'  # the Accept header of the change stream (R16)
    local _cvsm_r_header_request_id='X-Request-Id'  # the answer header an error's request_id comes from (R11)
    local _cvsm_r_header_retry_after='Retry-After'  # a 429's header: whole seconds or an HTTP date (R4)
    local _cvsm_r_header_e2e='Cvsm-E2E'  # the export's header marking an end-to-end team's envelopes (value 1)
    local _cvsm_r_header_last_event_id='Last-Event-ID'  # sent on a change-stream reconnection after an event with an id
    local _cvsm_r_max_server_message=300  # the most characters of a server's error text an error message carries
    local _cvsm_r_redacted='[redacted]'  # what stands for the token where a message would have shown it
    local _cvsm_r_capabilities='tls_ca_file proxy_env live refresh'  # the optional behaviours a driver may report (PROTOCOL.md); the shell SDK has all but live
    local _cvsm_r_message_did_you_mean='; did you mean "%s"?'  # appended to a not-found message when a name differs only in case (%s: that name)
    local _cvsm_r_message_not_set='%s is not set'  # a missing token, base URL or team: the message starts so (%s: the variable) and may go on with how to set it
    local _cvsm_r_message_invalid_secret_name='%s is not a valid secret name (letters, digits and _, not starting with a digit, at most 255 characters)'  # R10's not_found message (%s: the name, quoted)
    local _cvsm_r_message_keyless_e2e='this team is end-to-end: the token needs its key part'  # R15: a token without its key part reads an end-to-end team: the message holds this (it may go on with the token's shape)
    local _cvsm_r_message_first_format_token='the token is of the first end-to-end format (no pinned key version): make a new token'  # R15: a cvsm_ token with a key part of the first format: the message holds this
  }
  # <<< generated rules <<<
  local _cvsm_op="$1"
  shift
  local _cvsm_token='' _cvsm_base='' _cvsm_team='' _cvsm_env='' _cvsm_ttl='' _cvsm_timeout='' \
    _cvsm_retries='' _cvsm_ca='' _cvsm_curlcfg='' _cvsm_cdir='' _cvsm_root='' _cvsm_root_err='' \
    _cvsm_name='' _cvsm_nargs=0 _cvsm_json=0 _cvsm_overwrite=0 _cvsm_print=0 _cvsm_o_base='' \
    _cvsm_o_team='' _cvsm_o_env='' _cvsm_o_ttl='' _cvsm_o_timeout='' _cvsm_o_retries='' \
    _cvsm_o_ca='' _cvsm_o_curlcfg='' _cvsm_now=0 _cvsm_h='' _cvsm_enc='' _cvsm_tid='' \
    _cvsm_result='' _cvsm_values='' _cvsm_rid='' _cvsm_e_status='' _cvsm_e_ra='' \
    _cvsm_e_rid='' _cvsm_e_sugg='' _cvsm_sie='' _cvsm_o_sie='' _cvsm_defer=0 _cvsm_e_code=0 \
    _cvsm_e_msg='' _cvsm_fetched=0 _cvsm_nopts=0 _cvsm_stale_msg='' _cvsm_orc=0 _cvsm_e2e=0 \
    _cvsm_keypart='' _cvsm_mark='' _cvsm_renv=''
  _cvsm_parse_args "$@" || return
  # cvsm_run: what follows the options is the command.
  shift "$_cvsm_nopts"
  if [ "$_cvsm_op" = version ]; then
    printf '%s\n' "$_cvsm_ver"
    return 0
  fi
  _cvsm_cache_sweep_all
  if [ "$_cvsm_op" = clear_cache ]; then
    _cvsm_op_clear_cache
    return
  fi
  _cvsm_load_config || return
  case $_cvsm_op in
    check) return 0 ;;
    describe) _cvsm_op_describe ;;
    get) _cvsm_op_get || _cvsm_orc=$? ;;
    refresh) _cvsm_op_refresh || _cvsm_orc=$? ;;
    get_all) _cvsm_op_get_all || _cvsm_orc=$? ;;
    inject) _cvsm_op_inject || _cvsm_orc=$? ;;
    run) _cvsm_op_run "$@" ;;
  esac || return
  [ "$_cvsm_orc" != 0 ] || _cvsm_stale_report
  return "$_cvsm_orc"
}

# _cvsm_fail CODE MESSAGE prints "cvsm: MESSAGE" as one line on stderr (token redacted, control
# characters replaced), fills the CVSM_ERROR_* variables (status, retry-after, request id and
# suggestion from _cvsm_e_*) and returns CODE.
# shellcheck disable=SC2034 # the CVSM_ERROR_* variables are for the caller
_cvsm_fail() {
  local code="$1" msg="$2" rid="$_cvsm_e_rid" sugg="$_cvsm_e_sugg"
  if [ -n "${_cvsm_token-}" ]; then
    msg=${msg//"$_cvsm_token"/[redacted]}
    rid=${rid//"$_cvsm_token"/[redacted]}
    sugg=${sugg//"$_cvsm_token"/[redacted]}
  fi
  if [ -n "${_cvsm_keypart-}" ]; then
    msg=${msg//"$_cvsm_keypart"/[redacted]}
    msg=${msg//"${_cvsm_keypart%%.*}"/[redacted]}
  fi
  msg=${msg//[[:cntrl:]]/ }
  _cvsm_kind "$code"
  CVSM_ERROR_KIND=$_cvsm_enc
  CVSM_ERROR_MESSAGE=$msg
  CVSM_ERROR_STATUS=$_cvsm_e_status
  CVSM_ERROR_RETRY_AFTER=$_cvsm_e_ra
  CVSM_ERROR_REQUEST_ID=${rid//[[:cntrl:]]/ }
  CVSM_ERROR_SUGGESTION=${sugg//[[:cntrl:]]/ }
  printf 'cvsm: %s\n' "$msg" >&2
  return "$code"
}

# _cvsm_kind CODE sets _cvsm_enc to the error kind of exit code CODE.
_cvsm_kind() {
  case $1 in
    2) _cvsm_enc=configuration ;;
    3) _cvsm_enc=authentication ;;
    4) _cvsm_enc=permission_denied ;;
    5) _cvsm_enc=not_found ;;
    6) _cvsm_enc=rate_limited ;;
    7) _cvsm_enc=api ;;
    9) _cvsm_enc=decryption ;;
    *) _cvsm_enc=network ;;
  esac
}

# _cvsm_warn prints "cvsm: warning: MESSAGE" on stderr (token redacted, control characters
# replaced); the call still succeeds.
_cvsm_warn() {
  local msg="$1"
  [ -z "${_cvsm_token-}" ] || msg=${msg//"$_cvsm_token"/[redacted]}
  msg=${msg//[[:cntrl:]]/ }
  printf 'cvsm: warning: %s\n' "$msg" >&2
}

# _cvsm_parse_args reads the options and arguments of one public function into _cvsm_* locals.
# An explicit option is stored with an "x" prefix so that an empty value is told from no option.
# For cvsm_run the options end at "--" or at the first other argument, which starts the command;
# _cvsm_nopts says how many arguments the options took (with the "--").
_cvsm_parse_args() {
  local a v total=$#
  while [ $# -gt 0 ]; do
    a=$1
    shift
    v=''
    case $a in
      --environment=* | --team=* | --base-url=* | --cache-ttl=* | --timeout=* | --max-retries=* | \
        --ca-file=* | --curl-config=* | --stale-if-error=*)
        v=${a#*=}
        a=${a%%=*}
        ;;
      -e | --environment | --team | --base-url | --cache-ttl | --timeout | --max-retries | \
        --ca-file | --curl-config | --stale-if-error)
        if [ $# -eq 0 ]; then
          _cvsm_fail 2 "option $a needs a value"
          return
        fi
        v=$1
        shift
        ;;
    esac
    case $a in
      -e | --environment | --team | --base-url | --cache-ttl | --timeout | --max-retries | \
        --ca-file | --curl-config | --stale-if-error)
        case $_cvsm_op in
          clear_cache | version)
            _cvsm_fail 2 "cvsm_$_cvsm_op takes no options"
            return
            ;;
        esac
        ;;
    esac
    case $a in
      -e | --environment) _cvsm_o_env="x$v" ;;
      --team) _cvsm_o_team="x$v" ;;
      --base-url) _cvsm_o_base="x$v" ;;
      --cache-ttl) _cvsm_o_ttl="x$v" ;;
      --timeout) _cvsm_o_timeout="x$v" ;;
      --max-retries) _cvsm_o_retries="x$v" ;;
      --ca-file) _cvsm_o_ca="x$v" ;;
      --curl-config) _cvsm_o_curlcfg="x$v" ;;
      --stale-if-error) _cvsm_o_sie="x$v" ;;
      --json)
        case $_cvsm_op in
          get_all | describe) _cvsm_json=1 ;;
          *) _cvsm_fail 2 "unknown option --json"; return ;;
        esac
        ;;
      --overwrite | --print)
        case $_cvsm_op:$a in
          inject:* | run:--overwrite) ;;
          *) _cvsm_fail 2 "unknown option $a"; return ;;
        esac
        if [ "$a" = --overwrite ]; then _cvsm_overwrite=1; else _cvsm_print=1; fi
        ;;
      --)
        if [ "$_cvsm_op" = run ]; then
          _cvsm_nargs=$#
          _cvsm_nopts=$((total - $#))
          break
        fi
        while [ $# -gt 0 ]; do
          _cvsm_positional "$1"
          shift
        done
        ;;
      -?*)
        _cvsm_fail 2 "unknown option $a"
        return
        ;;
      *)
        if [ "$_cvsm_op" = run ]; then
          # The command starts at the first argument that is not an option.
          _cvsm_nargs=$(($# + 1))
          _cvsm_nopts=$((total - $# - 1))
          break
        fi
        _cvsm_positional "$a"
        ;;
    esac
  done
  if [ "$_cvsm_op" = run ]; then
    if [ "$_cvsm_nargs" -eq 0 ]; then
      _cvsm_fail 2 "usage: cvsm_run [OPTIONS] [--overwrite] -- COMMAND [ARGS...]"
      return
    fi
  elif [ "$_cvsm_op" = get ]; then
    if [ "$_cvsm_nargs" -ne 1 ]; then
      _cvsm_fail 2 "usage: cvsm_get [OPTIONS] NAME"
      return
    fi
  elif [ "$_cvsm_op" = refresh ]; then
    if [ "$_cvsm_nargs" -lt 1 ] || [ "$_cvsm_nargs" -gt 2 ]; then
      _cvsm_fail 2 "usage: cvsm_refresh [OPTIONS] NAME [ENVIRONMENT]"
      return
    fi
  elif [ "$_cvsm_nargs" -ne 0 ]; then
    _cvsm_fail 2 "unexpected argument \"$_cvsm_name\""
    return
  fi
}

# _cvsm_positional ARG takes one argument that is not an option: the NAME (of cvsm_get and
# cvsm_refresh), or cvsm_refresh's second, the ENVIRONMENT (kept with an "x" prefix, as an option).
_cvsm_positional() {
  _cvsm_nargs=$((_cvsm_nargs + 1))
  if [ "$_cvsm_op" = refresh ] && [ "$_cvsm_nargs" -eq 2 ]; then
    _cvsm_renv="x$1"
  else
    _cvsm_name=$1
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

# _cvsm_readable_file SOURCE PATH: succeeds when PATH is a file this user may read (checked without
# opening it, so a pipe such as <(...) is left for curl), else fails with a configuration error
# naming SOURCE.
_cvsm_readable_file() {
  case $2 in
    *[[:cntrl:]]*) _cvsm_fail 2 "$1 must not contain control characters"; return ;;
  esac
  if [ ! -e "$2" ] || [ -d "$2" ] || [ ! -r "$2" ]; then
    _cvsm_fail 2 "$1: cannot read $2"
    return
  fi
}

# _cvsm_load_config fills _cvsm_token, _cvsm_base, _cvsm_team (and _cvsm_tid, the team for a
# path), _cvsm_env, _cvsm_ttl, _cvsm_sie, _cvsm_timeout, _cvsm_retries, _cvsm_ca and _cvsm_curlcfg
# from the options and the CVSM_* variables, or fails with code 2.
_cvsm_load_config() {
  local v src
  command -v curl >/dev/null 2>&1 || { _cvsm_fail 2 "curl is required but was not found on PATH"; return; }
  command -v jq >/dev/null 2>&1 || { _cvsm_fail 2 "jq is required but was not found on PATH"; return; }

  # A token read from a mounted file keeps its surrounding whitespace; trim spaces, tabs, CR, LF.
  v=${CVSM_TOKEN:-}
  v=${v#"${v%%[!$' \t\r\n']*}"}
  v=${v%"${v##*[!$' \t\r\n']}"}
  if [ -z "$v" ]; then
    _cvsm_fail 2 "${_cvsm_r_message_not_set//\%s/$_cvsm_r_env_token}"
    return
  fi
  # Only visible ASCII (! to ~); checked byte by byte in the C locale.
  if ! (LC_ALL=C && case $v in *[![:graph:]]*) exit 1 ;; esac); then
    _cvsm_fail 2 "CVSM_TOKEN contains characters a token cannot have (only visible ASCII is allowed)"
    return
  fi
  # The token of an end-to-end team carries, after a dot, its X25519 private key and its pin (the
  # key version current when it was made and that key's commitment): only the part before the first
  # dot is the bearer, and the values are read, the team key checked against the pin and the values
  # opened by the cvsm command (_cvsm_delegate). A token of the first format (no pin) must be made
  # again; neither message quotes any part of the token.
  case $v in
    cvsm_*.*)
      if ! _cvsm_e2e_shape "$v"; then
        if _cvsm_e2e_v1_shape "$v"; then
          _cvsm_fail 2 "CVSM_TOKEN's key part is of the first format, made before end-to-end tokens carried their pin (cvsm_<64 hex>.<key>, without .<key version>.<commitment>): make a new token for the team (docs/e2e.md, format 2)"
        else
          _cvsm_fail 2 "CVSM_TOKEN has a key part but is not an end-to-end team's token (cvsm_<64 hex>.<private key>.<key version>.<commitment>): check how it was copied"
        fi
        return
      fi
      _cvsm_e2e=1 _cvsm_keypart=${v#*.}
      v=${v%%.*}
      ;;
  esac
  _cvsm_token=$v

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
  # A team id or slug goes into the path as it is, percent-encoded: the server takes either.
  _cvsm_urlenc "$v"
  _cvsm_tid=$_cvsm_enc

  _cvsm_pick CVSM_ENVIRONMENT "$_cvsm_o_env" --environment
  v=${_cvsm_result:-$_cvsm_r_default_environment} src=$_cvsm_enc
  case $v in *[![:graph:]]*) _cvsm_fail 2 "$src must not contain spaces or control characters"; return ;; esac
  _cvsm_env=$v

  _cvsm_pick CVSM_CACHE_TTL "$_cvsm_o_ttl" --cache-ttl
  v=${_cvsm_result:-$_cvsm_r_default_cache_ttl_seconds} src=$_cvsm_enc
  _cvsm_uint "$v" || { _cvsm_fail 2 "$src must be a non-negative integer (seconds)"; return; }
  _cvsm_ttl=$_cvsm_result

  _cvsm_pick CVSM_STALE_IF_ERROR "$_cvsm_o_sie" --stale-if-error
  v=${_cvsm_result:-$_cvsm_r_default_stale_if_error_seconds} src=$_cvsm_enc
  _cvsm_uint "$v" || { _cvsm_fail 2 "$src must be a non-negative integer (seconds)"; return; }
  _cvsm_sie=$_cvsm_result

  _cvsm_pick CVSM_MAX_RETRIES "$_cvsm_o_retries" --max-retries
  v=${_cvsm_result:-$_cvsm_r_default_max_retries} src=$_cvsm_enc
  _cvsm_uint "$v" || { _cvsm_fail 2 "$src must be a non-negative integer"; return; }
  _cvsm_retries=$_cvsm_result

  _cvsm_pick CVSM_TIMEOUT "$_cvsm_o_timeout" --timeout
  v=${_cvsm_result:-$_cvsm_r_default_timeout_seconds} src=$_cvsm_enc
  case $v in
    '' | *[!0-9.]* | .* | *. | *.*.*) _cvsm_fail 2 "$src must be a positive number of seconds"; return ;;
  esac
  while :; do
    case $v in 0[0-9]*) v=${v#0} ;; *) break ;; esac
  done
  case $v in *[1-9]*) ;; *) _cvsm_fail 2 "$src must be a positive number of seconds"; return ;; esac
  case $v in *.*) while :; do case $v in *.*0) v=${v%0} ;; *.) v=${v%.} && break ;; *) break ;; esac; done ;; esac
  _cvsm_timeout=$v

  _cvsm_pick CVSM_CA_FILE "$_cvsm_o_ca" --ca-file
  v=$_cvsm_result src=$_cvsm_enc
  if [ -n "$v" ]; then
    _cvsm_readable_file "$src" "$v" || return
  fi
  _cvsm_ca=$v

  _cvsm_pick CVSM_CURL_CONFIG "$_cvsm_o_curlcfg" --curl-config
  v=$_cvsm_result src=$_cvsm_enc
  if [ -n "$v" ]; then
    _cvsm_readable_file "$src" "$v" || return
  fi
  _cvsm_curlcfg=$v
  if [ -n "$v" ] && [ "$_cvsm_e2e" = 1 ]; then
    _cvsm_fail 2 "$src cannot be used with an end-to-end team's token: its requests are made by the cvsm command, whose own options (--ca-file, the proxy variables) apply"
    return
  fi
  _cvsm_result=''
  _cvsm_enc=''
}

# _cvsm_e2e_shape TOKEN: succeeds when TOKEN is an end-to-end team's token of format 2,
# cvsm_<64 lowercase hex>.<private key>.<key version>.<commitment>: the key and the commitment 43
# base64url characters each whose last character leaves no bits past their 32 bytes (so each has
# one spelling, as in every cvsm SDK), the key version a decimal from 1 without a leading zero
# (at most 10 digits).
_cvsm_e2e_shape() {
  local api="${1%%.*}" rest="${1#*.}" key pin com
  key=${rest%%.*} && rest=${rest#"$key"}
  case $rest in .*.*) rest=${rest#.} ;; *) return 1 ;; esac
  pin=${rest%%.*} com=${rest#*.}
  _cvsm_e2e_api "$api" && _cvsm_b64u32 "$key" && _cvsm_b64u32 "$com" || return 1
  case $pin in '' | 0* | *[!0123456789]* | ???????????*) return 1 ;; esac
  return 0
}

# _cvsm_e2e_v1_shape TOKEN: succeeds when TOKEN is an end-to-end team's token of the first format,
# cvsm_<64 lowercase hex>.<private key> (no pin), which no cvsm SDK reads any more.
_cvsm_e2e_v1_shape() {
  _cvsm_e2e_api "${1%%.*}" && _cvsm_b64u32 "${1#*.}"
}

# _cvsm_e2e_api API: succeeds when API is cvsm_ and 64 lowercase hex digits.
_cvsm_e2e_api() {
  [ "${#1}" -eq 69 ] || return 1
  case ${1#cvsm_} in *[!0123456789abcdef]*) return 1 ;; esac
}

# _cvsm_b64u32 TEXT: succeeds when TEXT is 32 bytes in canonical base64url without padding.
_cvsm_b64u32() {
  [ "${#1}" -eq 43 ] || return 1
  case $1 in *[!ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-]*) return 1 ;; esac
  case $1 in *[AEIMQUYcgkosw048]) return 0 ;; esac
  return 1
}

# _cvsm_cli sets _cvsm_enc to the cvsm command that reads an end-to-end team: the cvsm on PATH, else
# the one beside this file; without either it fails with a configuration error saying how to get it.
_cvsm_cli() {
  local p=''
  if [ -n "${ZSH_VERSION:-}" ]; then
    p=$(whence -p cvsm 2>/dev/null) || p=''
  else
    p=$(type -P cvsm 2>/dev/null) || p=''
  fi
  if [ -z "$p" ]; then
    _cvsm_here
    p=$_cvsm_enc/cvsm
    [ -f "$p" ] && [ -x "$p" ] || p=''
  fi
  if [ -z "$p" ]; then
    _cvsm_fail 2 "CVSM_TOKEN is an end-to-end team's token: its values are opened by the cvsm command, which is neither on PATH nor beside cvsm.sh (build it with make -C clients/go build, or go install ./cmd/cvsm in clients/go)"
    return
  fi
  _cvsm_enc=$p
}

# _cvsm_delegate get NAME | export: reads the by-name value of NAME, or every value, through the cvsm
# command (an end-to-end team's token: cvsm checks the team key against its pin and opens the values). _cvsm_result is then
# the value as a JSON string (get) or the JSON object of every value, keys sorted (export). The
# token goes to cvsm on its standard input (--token-file /dev/stdin), never on a command line or in
# its environment; the base URL, which may hold a password, in its environment. A failure is
# handled as _cvsm_request's with _cvsm_defer=1: its exit code (cvsm's, the same table) is
# returned, its message and fields left in _cvsm_e_*, read from the one JSON object cvsm writes on
# stderr with --error-json. With a cache directory, cvsm keeps the team key there between calls
# (--team-key-file), in an entry of the values' lifetime, so only a call without it fetches the key.
_cvsm_delegate() {
  local cli out rc=0 fields
  _cvsm_cli || return
  cli=$_cvsm_enc
  set -- "$@" --error-json --token-file /dev/stdin --team "$_cvsm_team" --environment "$_cvsm_env" \
    --timeout "$_cvsm_timeout" --max-retries "$_cvsm_retries"
  [ -z "$_cvsm_ca" ] || set -- "$@" --ca-file "$_cvsm_ca"
  if [ -n "$_cvsm_root" ]; then
    # The entry is per pin too: a key checked against one pin is never read under another.
    _cvsm_hash "$_cvsm_base"$'\n'"$_cvsm_team"$'\n'"$_cvsm_token"$'\n'"${_cvsm_keypart#*.}"$'\n'"team key"
    if _cvsm_cache_find values "$_cvsm_h" kept; then
      set -- "$@" --team-key-file "$_cvsm_result"
    elif (umask 077 && command mkdir -p -- "$_cvsm_root/values") 2>/dev/null; then
      _cvsm_now_ms
      set -- "$@" --team-key-file \
        "$_cvsm_root/values/$_cvsm_h.$_cvsm_now.$((_cvsm_now + (_cvsm_ttl + _cvsm_sie) * 1000))"
    fi
  fi
  if [ "$1" = get ]; then
    out=$( { set -o pipefail
      printf '%s.%s' "$_cvsm_token" "$_cvsm_keypart" | CVSM_BASE_URL=$_cvsm_base command "$cli" "$@" 2>&4 | command jq -Rsc '{value: .}'
    } 4>&1) || rc=$?
  else
    out=$( { set -o pipefail
      printf '%s.%s' "$_cvsm_token" "$_cvsm_keypart" | CVSM_BASE_URL=$_cvsm_base command "$cli" "$@" --format json 2>&4 |
        command jq -cS '{values: .}'
    } 4>&1) || rc=$?
  fi
  _cvsm_e_status='' _cvsm_e_ra='' _cvsm_e_rid='' _cvsm_e_sugg=''
  if [ "$rc" = 0 ]; then
    _cvsm_result=$(printf '%s' "$out" | command jq -j 'select(type == "object") | (.value // .values) | tojson' 2>/dev/null) &&
      [ -n "$_cvsm_result" ] && return 0
    rc=8
  fi
  fields=$(printf '%s' "$out" | command jq -r 'select(type == "object" and has("kind"))
    | [.message, (.status // "" | tostring), (.retry_after // "" | tostring), .request_id // "",
       .suggestion // ""] | map(gsub("[[:cntrl:]]"; " ")) | join("\t")' 2>/dev/null) || fields=''
  case $rc in
    [2-9]) ;;
    *) rc=8 ;;
  esac
  if [ -z "$fields" ]; then
    fields="the cvsm command failed without saying why"$'\t\t\t\t'
  fi
  _cvsm_e_msg=${fields%%$'\t'*} && fields=${fields#*$'\t'}
  _cvsm_e_status=${fields%%$'\t'*} && fields=${fields#*$'\t'}
  _cvsm_e_ra=${fields%%$'\t'*} && fields=${fields#*$'\t'}
  _cvsm_e_rid=${fields%%$'\t'*} && fields=${fields#*$'\t'}
  _cvsm_e_sugg=$fields
  [ "$rc" != 6 ] || [ -z "$_cvsm_e_ra" ] || _cvsm_e_msg="$_cvsm_e_msg (retry after ${_cvsm_e_ra}s)"
  _cvsm_e_code=$rc
  case $rc in 3 | 4) _cvsm_cache_drop_all ;; esac
  return "$rc"
}

# _cvsm_base_with sets _cvsm_enc to the base URL with its user:password part, if any, replaced by
# $1: '' where requests go (the client authenticates with its Bearer token only, so they are never
# sent), '***@' where it is printed.
_cvsm_base_with() {
  local rest host
  rest=${_cvsm_base#*://}
  host=${rest%%/*}
  case $host in
    *@*) _cvsm_enc="${_cvsm_base%%://*}://$1${host##*@}${rest#"$host"}" ;;
    *) _cvsm_enc=$_cvsm_base ;;
  esac
}

# _cvsm_redacted_base prints the base URL with any user:password part hidden.
_cvsm_redacted_base() {
  _cvsm_base_with '***@'
  printf '%s' "$_cvsm_enc"
}

# _cvsm_uid sets _cvsm_h to the user id ($UID in bash and zsh, else id -u).
_cvsm_uid() {
  _cvsm_h=${UID:-}
  [ -n "$_cvsm_h" ] || _cvsm_h=$(command id -u)
}

# _cvsm_cache_path sets _cvsm_cdir to the cache directory: CVSM_CACHE_DIR when set, else
# $XDG_RUNTIME_DIR/cvsm-$UID when XDG_RUNTIME_DIR names a directory of this user by an absolute
# path. Anywhere else there is no cache directory (_cvsm_cdir empty) and nothing goes to disk.
_cvsm_cache_path() {
  local x
  _cvsm_cdir=''
  if [ -n "${CVSM_CACHE_DIR:-}" ]; then
    _cvsm_cdir=$CVSM_CACHE_DIR
    return 0
  fi
  x=${XDG_RUNTIME_DIR:-}
  case $x in /*) ;; *) return 0 ;; esac
  if [ -d "$x" ] && [ -O "$x" ]; then
    _cvsm_uid
    _cvsm_cdir="${x%/}/cvsm-$_cvsm_h"
  fi
  return 0
}

# _cvsm_cache_root [quiet] sets _cvsm_root to the private cache directory, creating it with mode
# 0700 when missing. It returns 1 when there is no cache directory (_cvsm_cache_path), and 2 when
# it refuses one (reason in _cvsm_root_err): a symlink, a directory owned by someone else, or one
# that others can read or write. Without "quiet" a refusal is reported as a configuration error.
_cvsm_cache_root() {
  local dir line
  [ -z "$_cvsm_root" ] || return 0
  if [ -z "$_cvsm_root_err" ]; then
    _cvsm_cache_path
    dir=$_cvsm_cdir
    [ -n "$dir" ] || return 1
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
  fi
  [ "${1-}" = quiet ] || _cvsm_fail 2 "$_cvsm_root_err" || true
  return 2
}

# _cvsm_cache_sweep_all deletes, at the start of every call, each cache entry whose time is up
# (and any file an older version of this SDK left there), plus the values and team ids that earlier
# versions kept in ${TMPDIR:-/tmp}/cvsm-$UID when XDG_RUNTIME_DIR was unset. It creates nothing.
_cvsm_cache_sweep_all() {
  local f n e legacy
  _cvsm_uid
  _cvsm_cache_path
  for legacy in "${TMPDIR:-/tmp}/cvsm-$_cvsm_h" "/tmp/cvsm-$_cvsm_h"; do
    legacy=${legacy//\/\//\/}
    if [ "$legacy" != "${_cvsm_cdir%/}" ] && [ -d "$legacy/values" ] && [ ! -L "$legacy" ] && [ -O "$legacy" ]; then
      command rm -rf -- "$legacy/values" "$legacy/teams" 2>/dev/null
      command rmdir -- "$legacy" 2>/dev/null
    fi
  done
  [ -n "$_cvsm_cdir" ] && [ -d "$_cvsm_cdir" ] || return 0
  _cvsm_cache_root quiet || return 0
  _cvsm_now_ms
  set --
  for f in "$_cvsm_root"/values/* "$_cvsm_root"/teams/*; do
    [ -f "$f" ] || continue
    n=${f##*/}
    case $n in .*) continue ;; esac
    e=${n##*.}
    case $e in
      '' | *[!0-9]* | ????????????????*) set -- "$@" "$f" ;;
      *) [ "$e" -gt "$_cvsm_now" ] || set -- "$@" "$f" ;;
    esac
  done
  [ $# -eq 0 ] || command rm -f -- "$@" 2>/dev/null
  return 0
}

# Cache entries are files SUBDIR/HASH.FETCHED.EXPIRY (times in milliseconds since the epoch): the
# value was fetched at FETCHED and the file is deleted at EXPIRY, FETCHED + cache_ttl +
# stale_if_error of the call that wrote it. There is one copy of each entry: a value kept for
# stale-if-error is the cached entry itself, living stale_if_error seconds longer.

# _cvsm_cache_find SUBDIR HASH fresh|kept: sets _cvsm_result to the file of entry HASH in SUBDIR,
# the most recently fetched copy, and _cvsm_fetched to its fetch time, when it is still fresh
# (younger than cache_ttl) or, with "kept", younger than cache_ttl + stale_if_error; else fails.
_cvsm_cache_find() {
  local f rest t e life best='' bt=0
  _cvsm_now_ms
  life=$_cvsm_ttl
  [ "$3" = fresh ] || life=$((_cvsm_ttl + _cvsm_sie))
  for f in "$_cvsm_root/$1/$2".*.*; do
    [ -f "$f" ] || continue
    rest=${f##*/}
    rest=${rest#"$2".}
    t=${rest%%.*}
    e=${rest#*.}
    case $t:$e in *[!0-9:]* | :* | *: | ????????????????*:* | *:????????????????*) continue ;; esac
    if [ "$e" -le "$_cvsm_now" ] || [ $((t + life * 1000)) -le "$_cvsm_now" ]; then
      continue
    fi
    if [ -z "$best" ] || [ "$t" -gt "$bt" ]; then
      best=$f bt=$t
    fi
  done
  [ -n "$best" ] || return 1
  _cvsm_result=$best
  _cvsm_fetched=$bt
}

# _cvsm_cache_put SUBDIR HASH CONTENT writes CONTENT as entry HASH of SUBDIR, fetched now and
# expiring after cache_ttl + stale_if_error (nothing when both are 0), atomically with mode 0600,
# and removes the copies fetched before it (best effort; a unique temporary file, so concurrent
# subshells of one shell never write into the same one; a copy a concurrent call fetched later
# stays, and the newest copy is the one read).
_cvsm_cache_put() {
  local dir entry tmp f t rest life=$((_cvsm_ttl + _cvsm_sie))
  [ "$life" -gt 0 ] || return 0
  _cvsm_now_ms
  (
    umask 077
    dir=$_cvsm_root/$1
    entry=$2.$_cvsm_now.$((_cvsm_now + life * 1000))
    [ -d "$dir" ] || command mkdir -p -- "$dir" || exit 1
    tmp=$(command mktemp "$dir/.tmp.XXXXXX") || exit 1
    if printf '%s' "$3" >|"$tmp" && command mv -f -- "$tmp" "$dir/$entry"; then
      for f in "$dir/$2".*; do
        rest=${f##*/}
        rest=${rest#"$2".}
        t=${rest%%.*}
        # A copy of an older version (HASH.EXPIRY) goes too.
        case $rest:$t in *.*:?*) ;; *) command rm -f -- "$f" && continue ;; esac
        case $t in *[!0-9]*) command rm -f -- "$f" && continue ;; esac
        [ "$t" -ge "$_cvsm_now" ] || command rm -f -- "$f"
      done
      exit 0
    fi
    command rm -f -- "$tmp"
  ) 2>/dev/null
  return 0
}

# _cvsm_cache_forget SUBDIR HASH removes every copy of entry HASH.
_cvsm_cache_forget() {
  local f
  for f in "$_cvsm_root/$1/$2".*; do
    [ ! -f "$f" ] || command rm -f -- "$f" 2>/dev/null
  done
  return 0
}

# _cvsm_cache_drop_all removes every cached value, kept ones included (after an authentication or
# permission error), and the team ids of older versions.
_cvsm_cache_drop_all() {
  _cvsm_cache_root quiet || return 0
  command rm -rf -- "$_cvsm_root/values" "$_cvsm_root/teams" 2>/dev/null
  return 0
}

# _cvsm_op_clear_cache empties the value cache; team ids (not secrets) are kept.
_cvsm_op_clear_cache() {
  _cvsm_cache_path
  [ -n "$_cvsm_cdir" ] || return 0
  [ -e "$_cvsm_cdir" ] || [ -L "$_cvsm_cdir" ] || return 0
  _cvsm_cache_root || return
  command rm -rf -- "$_cvsm_root/values" || { _cvsm_fail 2 "cannot empty $_cvsm_root/values"; return; }
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

# _cvsm_urlenc STRING sets _cvsm_enc to STRING percent-encoded for a URL query or path segment.
_cvsm_urlenc() {
  case $1 in
    *[!A-Za-z0-9._~-]*) _cvsm_enc=$(command jq -rn --arg s "$1" '$s | @uri') ;;
    *) _cvsm_enc=$1 ;;
  esac
}

# _cvsm_cfgstr STRING sets _cvsm_enc to STRING quoted for a curl config file ("..." with \ and ").
_cvsm_cfgstr() {
  local s="$1"
  s=${s//\\/\\\\}
  s=${s//\"/\\\"}
  _cvsm_enc="\"$s\""
}

# _cvsm_backoff ATTEMPT sleeps a random time between 0 and 0.1 * 2**ATTEMPT seconds (full jitter).
_cvsm_backoff() {
  local e="$1" max ms frac
  [ "$e" -le 10 ] || e=10
  max=$((_cvsm_r_retry_backoff_base_ms * (1 << e)))
  _cvsm_now_ms
  ms=$(((((RANDOM << 15) ^ RANDOM) ^ (_cvsm_now % 1000000)) % (max + 1)))
  frac=00$((ms % 1000))
  frac=${frac#"${frac%???}"}
  command sleep "$((ms / 1000)).$frac"
}

# _cvsm_curl_reason CODE sets _cvsm_enc to a short description of a curl exit code.
_cvsm_curl_reason() {
  case $1 in
    5) _cvsm_enc="could not resolve the proxy's host name" ;;
    6) _cvsm_enc="could not resolve the server's host name" ;;
    7) _cvsm_enc="could not connect to the server" ;;
    28) _cvsm_enc="timed out after ${_cvsm_timeout}s" ;;
    52) _cvsm_enc="the server closed the connection without answering" ;;
    18 | 55 | 56) _cvsm_enc="the connection broke while talking to the server" ;;
    1 | 8) _cvsm_enc="the server did not answer with valid HTTP" ;;
    97) _cvsm_enc="the proxy handshake failed" ;;
    35 | 51 | 53 | 54 | 58 | 59 | 60 | 77 | 80 | 82 | 83 | 90 | 91) _cvsm_enc="TLS error (curl exit $1)" ;;
    '') _cvsm_enc="could not read the response (jq failed: cvsm needs jq 1.6 or newer)" ;;
    *) _cvsm_enc="transfer failed (curl exit $1)" ;;
  esac
}

# _cvsm_curl_config sets _cvsm_enc to the curl config (read by `curl -K -`) of one GET of URL: the
# token, headers, user agent, time limit, protocols, no redirects, private CA and proxy. It holds the token, so it
# only ever travels on a pipe.
_cvsm_curl_config() {
  local url="$1" c
  _cvsm_cfgstr "$url"
  c="url = $_cvsm_enc"$'\n'
  _cvsm_cfgstr "Authorization: Bearer $_cvsm_token"
  c="${c}header = $_cvsm_enc"$'\n'
  c="${c}header = \"Accept: $_cvsm_r_accept_json\""$'\n'
  c="${c}user-agent = \"${_cvsm_r_user_agent_prefix}shell/$_cvsm_ver\""$'\n'
  c="${c}max-time = $_cvsm_timeout"$'\n'
  c="${c}proto = \"=http,https\""$'\n'
  c="${c}suppress-connect-headers"$'\n'
  c="${c}no-location"$'\n'
  c="${c}globoff"$'\n'
  if [ -n "$_cvsm_ca" ]; then
    # The bundle replaces the system store: no CA directory besides it.
    _cvsm_cfgstr "$_cvsm_ca"
    c="${c}cacert = $_cvsm_enc"$'\n'"capath = \"/dev/null\""$'\n'
  fi
  # curl reads http_proxy, https_proxy/HTTPS_PROXY, all_proxy and no_proxy/NO_PROXY itself; it
  # leaves out HTTP_PROXY, which the other cvsm SDKs honour outside CGI (REQUEST_METHOD unset).
  case $url in
    http://*)
      if [ -z "${http_proxy:-}" ] && [ -n "${HTTP_PROXY:-}" ] && [ -z "${REQUEST_METHOD:-}" ]; then
        _cvsm_cfgstr "$HTTP_PROXY"
        c="${c}proxy = $_cvsm_enc"$'\n'
      fi
      ;;
  esac
  _cvsm_enc=$c
}

# _cvsm_jq_reader sets _cvsm_enc to the jq program that reads one curl transfer (headers, body, then
# "\ncvsm-curl-exit=N") and prints one line "STATUS<TAB>CURL_EXIT<TAB>RETRY_AFTER<TAB>REQUEST_ID<TAB>
# ERROR<TAB>E2E<TAB>SHAPE" (E2E: 1 when the answer carries Cvsm-E2E: 1) followed by the result of
# the request's filter (`shape`, defined before it) when the answer is a 2xx of the right shape.
# Everything is parsed in jq, in linear time, so that an answer of any size never goes through
# shell pattern matching (quadratic in zsh).
_cvsm_jq_reader() {
  # shellcheck disable=SC2016 # jq variables, not shell ones
  _cvsm_enc='
def sane: gsub("[[:cntrl:]]"; " ");
def header($lines; $name): first($lines[1:][]
  | capture("\\A(?<k>[^:]*):[ \\t]*(?<v>.*?)[ \\t]*\\z") | select(.k | ascii_downcase == $name) | .v) // null;
def retry_after:
  if . == null then ""
  elif test("\\A[0-9]{1,15}\\z") then tonumber | tostring
  else ([("%a, %d %b %Y %H:%M:%S GMT", "%A, %d-%b-%y %H:%M:%S GMT", "%a %b %e %H:%M:%S %Y") as $f
      | try (strptime($f) | mktime) catch empty] | first) as $t
    | if $t == null then "" else ($t - now | ceil | if . <= 0 then 0 else . end | tostring) end
  end;
($r | split("\ncvsm-curl-exit=")) as $p
| ($p[-1] | if test("\\A[0-9]{1,3}\\z") then . else "99" end) as $rc
| ($p[:-1] | join("\ncvsm-curl-exit=") | split("\r\n\r\n")) as $b
| (first(range(0; $b | length) | select($b[.] | test("\\AHTTP/[^ ]+ 1[0-9][0-9]") | not)) // 0) as $k
| (($b[$k] // "") | split("\r\n")) as $h
| ((($h[0] // "") | capture("\\AHTTP/[^ ]+ (?<s>[1-5][0-9][0-9])") | .s) // "") as $st
| ($b[$k + 1:] | join("\r\n\r\n")) as $body
| (if ($st | startswith("2")) then
     [$body | try fromjson catch empty | try shape catch empty | select(type == "string")]
     | if length == 1 then ["ok", .[0]] else ["bad", ""] end
   else ["", ""] end) as $res
| (if ($st | startswith("2")) or $st == "" then ""
   else ($body | try fromjson catch null
     | if type == "object" and (.error | type) == "string" then .error[:300] else "" end)
   end) as $err
| ([$st, $rc, (header($h; "retry-after") | retry_after), (header($h; "x-request-id") // "")[:200],
    $err, (if header($h; "cvsm-e2e") == "1" then "1" else "" end), $res[0]] | map(sane) | join("\t"))
  + "\n" + $res[1]
'
}

# _cvsm_curl runs curl on the config on stdin (after the user's CVSM_CURL_CONFIG, if any), writing
# the answer's headers and body on stdout; curl's own messages are dropped (its exit code says it).
_cvsm_curl() {
  if [ -n "$_cvsm_curlcfg" ]; then
    command curl -q -sS -D - -K "$_cvsm_curlcfg" -K - 2>/dev/null
  else
    command curl -q -sS -D - -K - 2>/dev/null
  fi
}

# _cvsm_split_response splits the reader's output in `out` (a local of _cvsm_request) into its
# first line, `meta`, and the rest, `out`, counting bytes: decoding the characters of an answer of
# many megabytes would cost seconds.
_cvsm_split_response() {
  if [ -n "${ZSH_VERSION:-}" ]; then
    setopt local_options no_multibyte
  else
    local LC_ALL=C
  fi
  meta=${out%%$'\n'*}
  if [ "${#meta}" -lt "${#out}" ]; then out=${out:${#meta}+1}; else out=''; fi
}

# _cvsm_request WHAT PATH FILTER [JQ ARGS...] GETs PATH under the base URL and runs the jq FILTER
# over a 2xx body; the filter must give one string, kept in _cvsm_result (and the answer's request
# id in _cvsm_rid, and in _cvsm_mark 1 when it carries Cvsm-E2E: 1, else nothing). WHAT (list,
# value or export) says what a 404 or 400 means: a wrong base URL, team or environment
# (configuration), except a 404 to the by-name value read, which is not found (5) for the caller
# to settle with the listing. Network errors, 502/503/504 and 2xx answers of the wrong shape are
# retried up to _cvsm_retries times with jittered backoff; 4xx never are. A 401 or 403 empties the
# cache. On failure it reports the error and returns its exit code; with
# _cvsm_defer=1 it reports nothing, leaving the code and message in _cvsm_e_code and _cvsm_e_msg
# (and the other fields in _cvsm_e_*) for the caller, which may serve a kept value instead. The
# token goes to curl on stdin, never on its command line; the answer never touches the disk.
_cvsm_request() {
  local what="$1" rpath="$2" filter="$3" cfg out meta st rc ra rid err mark shape attempt=0 code \
    retryable msg
  shift 3
  _cvsm_base_with ''
  _cvsm_curl_config "$_cvsm_enc$rpath"
  cfg=$_cvsm_enc
  _cvsm_jq_reader
  filter="def shape: $filter; $_cvsm_enc"
  while :; do
    out=$( { printf '%s' "$cfg" | _cvsm_curl; printf '\ncvsm-curl-exit=%s' "$?"; } |
      command jq -j -n --rawfile r /dev/stdin "$@" "$filter" 2>/dev/null)
    _cvsm_split_response
    st=${meta%%$'\t'*} && meta=${meta#*$'\t'}
    rc=${meta%%$'\t'*} && meta=${meta#*$'\t'}
    ra=${meta%%$'\t'*} && meta=${meta#*$'\t'}
    rid=${meta%%$'\t'*} && meta=${meta#*$'\t'}
    err=${meta%%$'\t'*} && meta=${meta#*$'\t'}
    mark=${meta%%$'\t'*} && meta=${meta#*$'\t'}
    shape=$meta
    code=0 retryable=0 msg=''
    _cvsm_e_status='' _cvsm_e_ra='' _cvsm_e_rid=$rid
    if [ "$rc" != 0 ]; then
      code=8 retryable=1
      _cvsm_curl_reason "$rc"
      msg="network error: $_cvsm_enc"
    else
      case $st in
        2??)
          if [ "$shape" = ok ]; then
            _cvsm_result=$out
            _cvsm_rid=$rid
            _cvsm_mark=$mark
            return 0
          fi
          code=8 retryable=1 msg="network error: unreadable response from the server (HTTP $st)"
          ;;
        ???)
          _cvsm_e_status=$st
          case $st in
            401) code=3 ;;
            403) code=4 ;;
            404) if [ "$what" = value ]; then code=5; else code=2; fi ;;
            400) code=2 ;;
            429) code=6 _cvsm_e_ra=$ra ;;
            *) code=7
              case " $_cvsm_r_retryable_statuses " in *" $st "*) retryable=1 ;; esac ;;
          esac
          msg="HTTP $st"
          [ -z "$err" ] || msg="$msg: $err"
          case $code:$st in
            2:404) msg="$msg (check the base URL, which ends in /api/v1, and the team)" ;;
            2:400) msg="$msg (check the environment)" ;;
            7:3??) msg="$msg (redirects are not followed; check the base URL)" ;;
            6:*) [ -z "$ra" ] || msg="$msg (retry after ${ra}s)" ;;
          esac
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
    case $code in 3 | 4) _cvsm_cache_drop_all ;; esac
    if [ "$_cvsm_defer" = 1 ]; then
      _cvsm_e_code=$code _cvsm_e_msg=$msg
      return "$code"
    fi
    _cvsm_fail "$code" "$msg"
    return
  done
}

# _cvsm_stale_ok: succeeds when the error the last deferred request ended with (_cvsm_e_code,
# _cvsm_e_status) lets a kept value be served (R14): a network error (an unreadable answer
# included), a 5xx or a 429, all after retries; never a 401 or 403 (the cache is gone), a 4xx, a
# 3xx or a configuration error. And only when stale-if-error is on.
_cvsm_stale_ok() {
  [ "$_cvsm_sie" -gt 0 ] || return 1
  case $_cvsm_e_code:$_cvsm_e_status in
    8:* | 6:* | 7:5??) return 0 ;;
  esac
  return 1
}

# _cvsm_served_stale WHAT notes that this call serves a kept value: _cvsm_stale_msg is the warning,
# naming WHAT (the secret, or every secret of the environment), the age of the kept value and the
# error's kind and message, never a value. _cvsm_stale_report gives it once the call succeeds.
_cvsm_served_stale() {
  local age
  _cvsm_now_ms
  age=$(((_cvsm_now - _cvsm_fetched) / 1000))
  _cvsm_kind "$_cvsm_e_code"
  _cvsm_stale_msg="serving a stale value of $1, fetched ${age}s ago, because refreshing it failed ($_cvsm_enc error: $_cvsm_e_msg)"
}

# _cvsm_stale_report: when this call served a kept value, sets CVSM_STALE=1 and prints the warning
# (one line on stderr); a call that fails after all says nothing of it.
# shellcheck disable=SC2034 # CVSM_STALE is for the caller
_cvsm_stale_report() {
  [ -n "$_cvsm_stale_msg" ] || return 0
  CVSM_STALE=1
  _cvsm_warn "$_cvsm_stale_msg"
  _cvsm_stale_msg=''
}

# _cvsm_valid_name NAME: succeeds when NAME is a valid secret name, [A-Za-z_][A-Za-z0-9_]{0,254}
# (letters spelt out: a range like A-Z depends on the locale).
_cvsm_valid_name() {
  case $1 in
    '' | [!abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_]* | \
      *[!abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_]*) return 1 ;;
  esac
  [ "${#1}" -le "$_cvsm_r_secret_name_max_length" ]
}

# _cvsm_op_get prints one value: from the cache when fresh (its own entry, or a cached get_all of
# the same environment), else read with one request, GET .../secrets/by-name/NAME. Only a 404 to it
# asks the listing (_cvsm_not_found). When the read fails with an error that allows it
# (_cvsm_stale_ok), a value kept for stale-if-error is printed instead, marked stale.
_cvsm_op_get() {
  local name="$_cvsm_name" hget='' hall='' vjson crc=0 code=0
  if ! _cvsm_valid_name "$name"; then
    _cvsm_fail 5 "${_cvsm_r_message_invalid_secret_name//\%s/\"${name:0:300}\"}"
    return
  fi
  if [ "$_cvsm_ttl" -gt 0 ] || [ "$_cvsm_sie" -gt 0 ]; then
    _cvsm_cache_root || crc=$?
    [ "$crc" != 2 ] || return 2
    if [ "$crc" = 0 ]; then
      _cvsm_key get "$name"
      hget=$_cvsm_h
      _cvsm_key all
      hall=$_cvsm_h
    fi
  fi
  if [ "$_cvsm_ttl" -gt 0 ] && [ -n "$hget" ]; then
    if _cvsm_cache_find values "$hget" fresh; then
      _cvsm_print_value "$_cvsm_result" && return 0
    fi
    if _cvsm_cache_find values "$hall" fresh; then
      _cvsm_print_value "$_cvsm_result" "$name" && return 0
    fi
  fi
  _cvsm_read_name "$name" || code=$?
  if [ "$code" = 0 ] && [ "$_cvsm_result" = e2e ]; then
    _cvsm_keyless
    return
  fi
  if [ "$code" = 0 ]; then
    vjson=$_cvsm_result
    [ -z "$hget" ] || _cvsm_cache_put values "$hget" "$vjson"
    printf '%s' "$vjson" | command jq -j .
    return
  fi
  if [ "$code" = 5 ]; then
    # The server says the secret is gone (or the team or base URL is wrong): nothing kept is served.
    [ -z "$hget" ] || _cvsm_cache_forget values "$hget"
    if [ "$_cvsm_e2e" = 1 ]; then
      # cvsm asked the listing itself: its error is the answer.
      _cvsm_fail 5 "$_cvsm_e_msg"
      return
    fi
    _cvsm_not_found "$name"
    return
  fi
  if [ -n "$hget" ] && _cvsm_stale_ok; then
    if _cvsm_cache_find values "$hget" kept && _cvsm_print_value "$_cvsm_result"; then
      _cvsm_served_stale "$name"
      return 0
    fi
    if _cvsm_cache_find values "$hall" kept && _cvsm_print_value "$_cvsm_result" "$name"; then
      _cvsm_served_stale "$name"
      return 0
    fi
  fi
  _cvsm_fail "$code" "$_cvsm_e_msg"
}

# _cvsm_read_name NAME reads NAME in _cvsm_env from the server, past the cache: one request by
# name (through the cvsm command for an end-to-end team's token), deferred as _cvsm_request's with
# _cvsm_defer=1. _cvsm_result is then the value as a JSON string, or the bare word e2e for an
# end-to-end team's answer ("e2e": true in its secret, where the server puts it, or beside the
# value) read without the key part; on failure the exit code is returned, the error in _cvsm_e_*.
_cvsm_read_name() {
  local env code=0
  _cvsm_urlenc "$_cvsm_env"
  env=$_cvsm_enc
  _cvsm_urlenc "$1"
  _cvsm_defer=1
  if [ "$_cvsm_e2e" = 1 ]; then
    _cvsm_delegate get "$1" || code=$?
  else
    _cvsm_request value "/teams/$_cvsm_tid/secrets/by-name/$_cvsm_enc?environment=$env" \
      'if type == "object" and (.secret | type) == "object" and (.value | type) == "string"
        then (if .secret.e2e == true or .e2e == true then "e2e" else .value | tojson end)
        else error("not a by-name answer") end' || code=$?
  fi
  _cvsm_defer=0
  return "$code"
}

# _cvsm_op_refresh prints one value read past the cache (R17): the request, errors and not-found
# listing of _cvsm_op_get, but never a cached or kept value. In the configured environment (no
# ENVIRONMENT argument, or the same one) the value read replaces the cached entry (a 404 removes
# it); another environment's is read there and not cached.
_cvsm_op_refresh() {
  local name="$_cvsm_name" env="$_cvsm_env" h='' crc=0 code=0
  if [ -n "$_cvsm_renv" ]; then
    env=${_cvsm_renv#x}
    case $env in
      '') _cvsm_fail 2 "cvsm_refresh: ENVIRONMENT must not be empty (leave it out for the configured one)"; return ;;
      *[![:graph:]]*) _cvsm_fail 2 "cvsm_refresh: ENVIRONMENT must not contain spaces or control characters"; return ;;
    esac
  fi
  if ! _cvsm_valid_name "$name"; then
    _cvsm_fail 5 "${_cvsm_r_message_invalid_secret_name//\%s/\"${name:0:300}\"}"
    return
  fi
  if [ "$_cvsm_ttl" -gt 0 ] || [ "$_cvsm_sie" -gt 0 ]; then
    _cvsm_cache_root || crc=$?
    [ "$crc" != 2 ] || return 2
    if [ "$crc" = 0 ] && [ "$env" = "$_cvsm_env" ]; then
      _cvsm_key get "$name"
      h=$_cvsm_h
    fi
  fi
  _cvsm_env=$env
  _cvsm_read_name "$name" || code=$?
  if [ "$code" = 0 ] && [ "$_cvsm_result" = e2e ]; then
    _cvsm_keyless
    return
  fi
  if [ "$code" = 0 ]; then
    [ -z "$h" ] || _cvsm_cache_put values "$h" "$_cvsm_result"
    printf '%s' "$_cvsm_result" | command jq -j .
    return
  fi
  if [ "$code" = 5 ]; then
    [ -z "$h" ] || _cvsm_cache_forget values "$h"
    if [ "$_cvsm_e2e" = 1 ]; then
      _cvsm_fail 5 "$_cvsm_e_msg"
      return
    fi
    _cvsm_not_found "$name"
    return
  fi
  _cvsm_fail "$code" "$_cvsm_e_msg"
}

# _cvsm_keyless fails with the configuration error of a token without its key part that read an
# end-to-end team (a by-name answer marked e2e, or an export carrying Cvsm-E2E: 1), with the
# answer's request id.
_cvsm_keyless() {
  _cvsm_e_rid=$_cvsm_rid
  _cvsm_fail 2 "team $_cvsm_team is end-to-end: its values are sealed, and CVSM_TOKEN needs its key part (cvsm_....<key>, as it was shown when it was made) to open them"
}

# _cvsm_print_value FILE [NAME] prints the value a cache entry holds: a JSON string, or with NAME
# that member of a cached get_all object. It fails, printing nothing, when the entry is not that.
_cvsm_print_value() {
  if [ $# -eq 1 ]; then
    command jq -j 'if type == "string" then . else error("bad entry") end' "$1" 2>/dev/null
  else
    command jq -j --arg n "$2" 'if type == "object" and (.[$n] | type) == "string" then .[$n] else error("miss") end' "$1" 2>/dev/null
  fi
}

# _cvsm_not_found NAME settles a 404 to the by-name read of NAME (its status and request id in
# _cvsm_e_*) with the listing, GET .../secrets?environment=ENV&search=NAME: a 404 or 400 to it is a
# configuration error (R9: a wrong team or base URL, or environment); a listing makes it not found,
# with the by-name answer's status and request id, suggesting an entry that differs only in case.
_cvsm_not_found() {
  local name="$1" rid="$_cvsm_e_rid" env sugg
  _cvsm_urlenc "$_cvsm_env"
  env=$_cvsm_enc
  _cvsm_urlenc "$name"
  # shellcheck disable=SC2016 # jq variables, not shell ones
  _cvsm_request list "/teams/$_cvsm_tid/secrets?environment=$env&search=$_cvsm_enc" \
    '(.secrets | if type == "array" then . else error("no secrets") end)
      | [.[] | select(type == "object" and (.name | type) == "string"
          and (.environment == null or .environment == $env)) | .name
        | select(. != $n and ascii_downcase == ($n | ascii_downcase))]
      | first // ""' \
    --arg n "$name" --arg env "$_cvsm_env" || return
  sugg=$_cvsm_result
  _cvsm_e_status=404 _cvsm_e_rid=$rid _cvsm_e_sugg=$sugg
  if [ -n "$sugg" ]; then
    _cvsm_fail 5 "secret \"$name\" not found in $_cvsm_env${_cvsm_r_message_did_you_mean//\%s/$sugg}"
  else
    _cvsm_fail 5 "secret \"$name\" not found in $_cvsm_env"
  fi
}

# _cvsm_fetch_all sets _cvsm_values to the JSON object name -> value of the environment, its keys
# sorted: from the cache when fresh, else from the export endpoint (format=json), then cached.
# When the export fails with an error that allows it (_cvsm_stale_ok), a kept get_all result is
# used instead, marked stale.
_cvsm_fetch_all() {
  local hall='' crc=0 code=0
  if [ "$_cvsm_ttl" -gt 0 ] || [ "$_cvsm_sie" -gt 0 ]; then
    _cvsm_cache_root || crc=$?
    [ "$crc" != 2 ] || return 2
    if [ "$crc" = 0 ]; then
      _cvsm_key all
      hall=$_cvsm_h
    fi
  fi
  if [ "$_cvsm_ttl" -gt 0 ] && [ -n "$hall" ] && _cvsm_cache_find values "$hall" fresh &&
    _cvsm_read_all "$_cvsm_result"; then
    return 0
  fi
  _cvsm_urlenc "$_cvsm_env"
  _cvsm_defer=1
  if [ "$_cvsm_e2e" = 1 ]; then
    _cvsm_delegate export || code=$?
  else
    # shellcheck disable=SC2016 # jq variables, not shell ones
    _cvsm_request export "/teams/$_cvsm_tid/secrets/export?format=json&environment=$_cvsm_enc" \
      'if type == "object" and all(.[]; type == "string")
        then . as $o | reduce keys[] as $k ({}; .[$k] = $o[$k]) | tojson
        else error("not an object of strings") end' || code=$?
    # The export of an end-to-end team (Cvsm-E2E: 1) holds envelopes: this token cannot open them.
    if [ "$code" = 0 ] && [ "$_cvsm_mark" = 1 ]; then
      _cvsm_defer=0
      _cvsm_keyless
      return
    fi
  fi
  _cvsm_defer=0
  if [ "$code" = 0 ]; then
    _cvsm_values=$_cvsm_result
    [ -z "$hall" ] || _cvsm_cache_put values "$hall" "$_cvsm_values"
    return 0
  fi
  if [ -n "$hall" ] && _cvsm_stale_ok && _cvsm_cache_find values "$hall" kept &&
    _cvsm_read_all "$_cvsm_result"; then
    _cvsm_served_stale "every secret of $_cvsm_env"
    return 0
  fi
  _cvsm_fail "$code" "$_cvsm_e_msg"
}

# _cvsm_read_all FILE sets _cvsm_values to the get_all object a cache entry holds, or fails.
_cvsm_read_all() {
  _cvsm_values=$(command jq -c 'if type == "object" then . else error("bad entry") end' "$1" 2>/dev/null)
}

# _cvsm_op_get_all prints the values as NAME='value' lines sorted by name (a name that is not a
# valid variable name becomes a "# skipped" comment line), or with --json one JSON object.
_cvsm_op_get_all() {
  _cvsm_fetch_all || return
  if [ "$_cvsm_json" = 1 ]; then
    printf '%s\n' "$_cvsm_values"
  else
    printf '%s' "$_cvsm_values" | command jq -r 'keys[] as $k
      | if ($k | test("\\A[A-Za-z_][A-Za-z0-9_]*\\z")) then "\($k)=\(.[$k] | @sh)"
        else "# cvsm: skipped \($k | tojson): not a valid variable name" end'
  fi
}

# _cvsm_env_script checks every name and value of _cvsm_values (a name must be a variable name, a
# value must not hold a NUL character: no environment can), failing with a configuration error that
# names the first bad secret, and sets _cvsm_script to the _cvsm_inject_one calls that export them,
# in name order.
_cvsm_env_script() {
  local _cvsm_bad
  _cvsm_bad=$(printf '%s' "$_cvsm_values" | command jq -r '[keys[] as $k
      | if ($k | test("\\A[A-Za-z_][A-Za-z0-9_]*\\z") | not) then "secret \($k | tojson) is not a valid variable name"
        elif (.[$k] | explode | any(. == 0)) then "secret \($k | tojson) holds a NUL character, which no environment variable can"
        else empty end]
    | if length == 0 then "" elif length == 1 then .[0] else "\(.[0]) (and \(length - 1) more)" end') || {
    _cvsm_fail 8 "network error: unreadable response from the server"
    return
  }
  if [ -n "$_cvsm_bad" ]; then
    _cvsm_fail 2 "$_cvsm_bad; nothing was set"
    return
  fi
  _cvsm_script=$(printf '%s' "$_cvsm_values" | command jq -r 'keys[] as $k | "_cvsm_inject_one \($k) \(.[$k] | @sh)"') || {
    _cvsm_fail 8 "network error: unreadable response from the server"
    return
  }
}

# _cvsm_op_inject exports every secret into the calling shell, all or nothing (_cvsm_env_script;
# see _cvsm_inject_one). Its locals, like every local on the way here, start with _cvsm_: a secret
# of that name is never set.
_cvsm_op_inject() {
  local _cvsm_script=''
  _cvsm_fetch_all || return
  _cvsm_env_script || return
  eval "$_cvsm_script"
}

# _cvsm_op_run CMD [ARGS...] fetches every secret, checks them all (_cvsm_env_script), then runs
# CMD in a subshell that exports them (as cvsm_inject does, so variables already set are kept
# unless --overwrite) and replaces itself with CMD (exec). The calling shell gets none of the
# values; no value is ever on a command line (env NAME=value would show it in ps); CMD is the
# subshell's process, so a signal sent to that process, or to the terminal's foreground process
# group (Ctrl-C), reaches CMD itself; and the status is CMD's, 128+N when signal N killed it (127
# when CMD cannot be found, as for env).
_cvsm_op_run() {
  local _cvsm_script=''
  _cvsm_fetch_all || return
  _cvsm_env_script || return
  _cvsm_stale_report
  (
    eval "$_cvsm_script"
    exec -- "$@"
  )
}

# _cvsm_isset NAME: succeeds when the variable NAME is set (even to "").
_cvsm_isset() {
  if [ -n "${ZSH_VERSION:-}" ]; then
    eval "[ -n \"\${$1+x}\" ]"
  else
    [ -n "${!1+x}" ]
  fi
}

# _cvsm_exported NAME: succeeds when the variable NAME is exported (in the environment of commands).
_cvsm_exported() {
  local d
  if [ -n "${ZSH_VERSION:-}" ]; then
    eval "d=\${(t)$1}"
    case $d in *export*) return 0 ;; esac
    return 1
  fi
  d=$(declare -p "$1" 2>/dev/null) || return 1
  d=${d#declare -}
  case ${d%% *} in *x*) return 0 ;; esac
  return 1
}

# _cvsm_inject_one NAME VALUE exports NAME=VALUE unless NAME is already set (and --overwrite was not
# given), is special to the shell, or is read-only; with --print it prints NAME when it set it.
_cvsm_inject_one() {
  case $1 in
    _cvsm_* | CVSM_ERROR_* | CVSM_STALE | UID | EUID | GID | EGID | PPID | USERNAME | BASHPID | BASHOPTS | SHELLOPTS | BASH_* | \
      RANDOM | SRANDOM | SECONDS | LINENO | HISTCMD | EPOCHSECONDS | EPOCHREALTIME | FUNCNAME | \
      GROUPS | DIRSTACK | PIPESTATUS | IFS | path | fpath | cdpath | manpath | mailpath | module_path | \
      psvar | argv | status | pipestatus)
      _cvsm_warn "skipped $1: special to the shell"
      return 0
      ;;
  esac
  if [ "$_cvsm_overwrite" != 1 ] && _cvsm_isset "$1"; then
    _cvsm_exported "$1" ||
      _cvsm_warn "kept $1: it is set in this shell but not exported, so programs started from it do not see it (export it, or use --overwrite)"
    return 0
  fi
  if ! export "$1=$2" 2>/dev/null; then
    _cvsm_warn "skipped $1: the variable cannot be set (read-only?)"
    return 0
  fi
  [ "$_cvsm_print" != 1 ] || printf '%s\n' "$1"
}

# _cvsm_op_describe prints the effective configuration: key=value lines, or --json with the keys
# base_url, team, environment, cache_ttl, timeout, max_retries and stale_if_error. The token is
# never printed.
_cvsm_op_describe() {
  if [ "$_cvsm_json" = 1 ]; then
    command jq -nc --arg b "$(_cvsm_redacted_base)" --arg t "$_cvsm_team" --arg e "$_cvsm_env" \
      --argjson ttl "$_cvsm_ttl" --argjson to "$_cvsm_timeout" --argjson r "$_cvsm_retries" \
      --argjson sie "$_cvsm_sie" \
      '{base_url: $b, team: $t, environment: $e, cache_ttl: $ttl, timeout: $to, max_retries: $r,
        stale_if_error: $sie}'
    return
  fi
  _cvsm_cache_path
  printf 'cvsm-shell/%s\nbase_url=%s\nteam=%s\nenvironment=%s\ncache_ttl=%s\nstale_if_error=%s\ntimeout=%s\nmax_retries=%s\nca_file=%s\ncurl_config=%s\ntoken=<hidden>\ncache_dir=%s\n' \
    "$_cvsm_ver" "$(_cvsm_redacted_base)" "$_cvsm_team" "$_cvsm_env" "$_cvsm_ttl" "$_cvsm_sie" "$_cvsm_timeout" \
    "$_cvsm_retries" "$_cvsm_ca" "$_cvsm_curlcfg" "${_cvsm_cdir:-none (no XDG_RUNTIME_DIR: nothing is cached on disk)}"
}

# _cvsm_here sets _cvsm_enc to the directory this file was sourced from, where _cvsm_cli looks for
# the cvsm command when it is not on PATH. It is defined here, while that path is known.
eval "_cvsm_here() { _cvsm_enc=$(
  d=${BASH_SOURCE[0]:-$0}
  case $d in */*) d=${d%/*} ;; *) d=. ;; esac
  cd -- "$d" 2>/dev/null && d=$PWD
  printf '%q' "$d"
); }"
