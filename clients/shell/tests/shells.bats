#!/usr/bin/env bats
# shells.bats - behaviour inside the caller's shell: strict mode, return codes only, no leaked
# variables but the six CVSM_ERROR_*, xtrace kept for the caller but hiding the token and values;
# in bash and in zsh.

load helpers

# (common_setup leaves the optional CVSM_* variables unset, so set -u meets them unset too.)
@test "under set -euo pipefail the functions work, a failure can be handled with ||, CVSM_ERROR_* read" {
  for sh in $(shells_to_test); do
    run --separate-stderr "$sh" -c 'set -euo pipefail
      source "$1"
      cvsm_check_config
      echo "[$CVSM_ERROR_KIND$CVSM_ERROR_MESSAGE$CVSM_ERROR_STATUS$CVSM_ERROR_RETRY_AFTER$CVSM_ERROR_REQUEST_ID$CVSM_ERROR_SUGGESTION]"
      v=$(cvsm_get API_KEY)
      rc=0
      cvsm_get NOPE 2>/dev/null || rc=$?
      echo "$CVSM_ERROR_KIND $CVSM_ERROR_REQUEST_ID"
      eval "$(cvsm_get_all)"
      cvsm_inject
      cvsm_describe >/dev/null
      cvsm_clear_cache
      echo "alive $v $rc $DB $CVSM_ERROR_KIND."' _ "$SDK"
    [ "$status" -eq 0 ]
    [ "$output" = "$(printf '[]\nnot_found req-2\nalive k-prod 5 db-short .')" ]
    stub_reset
  done
}

@test "under set -e an unhandled failure stops the script with the documented code" {
  for sh in $(shells_to_test); do
    run "$sh" -c 'set -e; source "$1"; cvsm_get NOPE; echo unreachable' _ "$SDK"
    [ "$status" -eq 5 ]
    [[ $output != *unreachable* ]]
  done
}

@test "the functions return, they never exit the caller's shell" {
  for sh in $(shells_to_test); do
    run "$sh" -c 'source "$1"; cvsm_get NOPE; echo "after get $?"; CVSM_TOKEN= cvsm_get_all; echo "after config $?"
      CVSM_BASE_URL=http://127.0.0.1:9/api/v1 CVSM_MAX_RETRIES=0 cvsm_inject; echo "after network $?"' _ "$SDK"
    [ "$status" -eq 0 ]
    [[ $output == *"after get 5"*"after config 2"*"after network 8"* ]]
  done
}

@test "in bash the functions leave no variable behind but the six CVSM_ERROR_* and CVSM_STALE" {
  run bash -c 'source "$1"
    before=$(compgen -v | grep -v -e "^BASH_" -e "^_$" -e "^FUNCNAME$" -e "^PIPESTATUS$" | sort)
    cvsm_get API_KEY >/dev/null; cvsm_get NOPE 2>/dev/null; cvsm_get_all >/dev/null
    cvsm_get_all --json >/dev/null; cvsm_describe >/dev/null; cvsm_check_config; cvsm_clear_cache
    CVSM_CACHE_TTL=0 cvsm_get API_KEY >/dev/null; cvsm_get --bogus 2>/dev/null; cvsm_version >/dev/null
    cvsm_run -- true; cvsm_run --overwrite true
    after=$(compgen -v | grep -v -e "^BASH_" -e "^_$" -e "^FUNCNAME$" -e "^PIPESTATUS$" -e "^before$" | sort)
    comm -3 <(echo "$before") <(echo "$after")' _ "$SDK"
  [ "$status" -eq 0 ]
  [ "$(printf '%s\n' "$output" | sed 's/^\t//' | sort)" = "$(printf '%s\n' CVSM_ERROR_KIND CVSM_ERROR_MESSAGE CVSM_ERROR_REQUEST_ID CVSM_ERROR_RETRY_AFTER CVSM_ERROR_STATUS CVSM_ERROR_SUGGESTION CVSM_STALE | sort)" ]
}

@test "in zsh the functions leave no variable behind and print nothing extra" {
  need_zsh
  run zsh -c 'source "$1"
    before=(${(k)parameters})
    v=$(cvsm_get API_KEY); cvsm_get NOPE 2>/dev/null; out=$(cvsm_get_all); cvsm_describe >/dev/null
    cvsm_check_config; cvsm_clear_cache; cvsm_version >/dev/null; cvsm_run -- true
    after=(${(k)parameters})
    print -l -- ${after:|before}' _ "$SDK"
  [ "$status" -eq 0 ]
  [ "$(printf '%s\n' "$output" | grep -v -x -e v -e out -e before -e 'CVSM_ERROR_[A-Z_]*' -e CVSM_STALE | grep -c .)" -eq 0 ]
  [ "$(printf '%s\n' "$output" | grep -c -x -e 'CVSM_ERROR_[A-Z_]*')" -eq 6 ]
}

@test "inject sets exactly the secret names, and only they are new in the shell" {
  run bash -c 'source "$1"
    before=$(compgen -v | sort)
    cvsm_inject
    comm -13 <(echo "$before") <(compgen -v | grep -v -e "^before$" -e "^BASH_" -e "^_$" -e "^CVSM_ERROR_" -e "^CVSM_STALE$" | sort)' _ "$SDK"
  [ "$output" = "$(printf 'API_KEY\nDB\nDB_URL\nEMPTY\nMULTI\nQUOTE\nUNICODE')" ]
}

@test "under set -x the trace shows neither the token nor a value, and xtrace stays on afterwards" {
  for sh in $(shells_to_test); do
    # (The caller's own assignments, like v=$(cvsm_get X), are traced by the shell itself.)
    run "$sh" -c 'source "$1"; set -x; cvsm_get API_KEY >/dev/null; cvsm_get_all >/dev/null; cvsm_inject
      CVSM_TOKEN=cvsm_wrong cvsm_get API_KEY 2>/dev/null || true; : marker-after' _ "$SDK"
    [ "$status" -eq 0 ]
    [[ $output == *"marker-after"* ]]
    [[ $output != *"$TOKEN"* ]]
    [[ $output != *k-prod* ]]
    [[ $output != *db-short* ]]
    [[ $output != *postgres://* ]]
  done
}

@test "in zsh the caller's options (ksharrays off, nomatch on) are unchanged after a call" {
  need_zsh
  run zsh -c 'source "$1"; setopt nomatch; before=$(setopt); cvsm_get API_KEY >/dev/null
    cvsm_get_all >/dev/null; after=$(setopt); [[ $before == "$after" ]] && echo same' _ "$SDK"
  [ "$output" = same ]
}

@test "in bash the caller's shell options and umask are unchanged after a call" {
  run bash -c 'source "$1"; umask 022; set -C; before="$-:$(umask):$(shopt -p)"; cvsm_get API_KEY >/dev/null
    cvsm_get_all >/dev/null; [ "$before" = "$-:$(umask):$(shopt -p)" ] && echo same' _ "$SDK"
  [ "$output" = same ]
}

@test "zsh: values, empty values and trailing newlines come through cvsm_get unchanged" {
  need_zsh
  zsh -c 'source "$1"; cvsm_get MULTI' _ "$SDK" >"$BATS_TEST_TMPDIR/out"
  printf 'line1\nline2\n\n' | cmp - "$BATS_TEST_TMPDIR/out"
  zsh -c 'source "$1"; cvsm_get EMPTY' _ "$SDK" >"$BATS_TEST_TMPDIR/out"
  [ ! -s "$BATS_TEST_TMPDIR/out" ]
  run zsh -c 'source "$1"; cvsm_get UNICODE' _ "$SDK"
  [ "$output" = "héllo wörld ✓" ]
}

@test "zsh: cvsm_inject exports to child processes and keeps existing variables" {
  need_zsh
  run zsh -c 'source "$1"; export API_KEY=mine; cvsm_inject --print; env | grep -e "^API_KEY=" -e "^DB="' _ "$SDK"
  [ "$status" -eq 0 ]
  [ "$output" = "$(printf 'DB\nDB_URL\nEMPTY\nMULTI\nQUOTE\nUNICODE\nAPI_KEY=mine\nDB=db-short')" ]
}

@test "zsh: cvsm_inject never touches zsh's special lowercase names such as path" {
  need_zsh
  stub_reset '[{"id": "a", "name": "path", "environment": "production", "value": "/nowhere"},
               {"id": "b", "name": "FINE", "environment": "production", "value": "1"}]'
  run zsh -c 'source "$1"; cvsm_inject --overwrite --print 2>/dev/null; command -v jq >/dev/null && echo "PATH intact"' _ "$SDK"
  [ "$output" = "$(printf 'FINE\nPATH intact')" ]
}

@test "in bash the caller's noglob and failglob neither break the cache nor change after a call" {
  run bash -c 'source "$1"; set -f; shopt -s failglob; before="$-:$(shopt -p failglob)"
    cvsm_get API_KEY >/dev/null; CVSM_CACHE_TTL=0 cvsm_get DB >/dev/null; cvsm_get API_KEY
    [ "$before" = "$-:$(shopt -p failglob)" ] && echo " same"' _ "$SDK"
  [ "$status" -eq 0 ]
  [ "$output" = "k-prod same" ]
  [ "$(count_requests /by-name/API_KEY)" -eq 1 ]
}
