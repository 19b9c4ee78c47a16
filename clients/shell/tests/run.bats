#!/usr/bin/env bats
# run.bats - cvsm_run: the command gets the secrets in its environment only, existing variables
# win unless --overwrite, its status (or 128+N) is returned, a signal for its process reaches it,
# and cvsm's own failures stop it from starting with the usual exit codes.

load helpers

# A command that prints what it sees of a few variables, as JSON.
SHOW='jq -n "{API_KEY: env.API_KEY, MULTI: env.MULTI, QUOTE: env.QUOTE, EMPTY: env.EMPTY}"'

@test "the command sees every secret in its environment, exactly" {
  run --separate-stderr cvsm_run -- sh -c "$SHOW"
  [ "$status" -eq 0 ]
  [ "$stderr" = "" ]
  [ "$(jq -c . <<<"$output")" = "$(jq -nc '{API_KEY: "k-prod", MULTI: "line1\nline2\n\n", QUOTE: "it'"'"'s \"q\" $(touch PWNED) `id` \\ $HOME", EMPTY: ""}')" ]
  [ ! -e PWNED ]
  [ "$(count_requests /export)" -eq 1 ]
}

@test "nothing leaks into the calling shell, in bash and zsh" {
  local sh
  for sh in $(shells_to_test); do
    run "$sh" -c 'source "$1"; cvsm_run -- true; echo "rc=$? API_KEY=${API_KEY-unset} DB=${DB-unset}"
      env | grep -c -e "^API_KEY=" -e "^DB=" || true' _ "$SDK"
    [ "$status" -eq 0 ]
    [ "$output" = "rc=0 API_KEY=unset DB=unset
0" ]
  done
}

@test "variables already set win, unless --overwrite; the caller's value is unchanged either way" {
  export API_KEY=mine
  run cvsm_run -- sh -c "$SHOW"
  [ "$(jq -r .API_KEY <<<"$output")" = mine ]
  [ "$(jq -r .MULTI <<<"$output")" = "$(printf 'line1\nline2\n\n')" ]
  run cvsm_run --overwrite -- sh -c "$SHOW"
  [ "$(jq -r .API_KEY <<<"$output")" = k-prod ]
  cvsm_run --overwrite -- true
  [ "$API_KEY" = mine ]
}

@test "the command's exit status is returned, 128+N when signal N killed it, 127 when it is not found" {
  local rc=0
  cvsm_run -- sh -c 'exit 3' || rc=$?
  [ "$rc" -eq 3 ]
  # A status is the command's, not a cvsm error: CVSM_ERROR_* stay empty.
  [ -z "$CVSM_ERROR_KIND" ]
  rc=0
  cvsm_run -- sh -c 'kill -TERM $$' || rc=$?
  [ "$rc" -eq 143 ]
  rc=0
  cvsm_run -- /nonexistent/app 2>/dev/null || rc=$?
  [ "$rc" -eq 127 ]
  run zsh -c 'source "$1"; cvsm_run -- sh -c "exit 5"' _ "$SDK" 2>/dev/null || true
  if command -v zsh >/dev/null; then [ "$status" -eq 5 ]; fi
}

@test "a SIGTERM sent to the process cvsm_run started reaches the command itself" {
  local sh bg child ppid
  for sh in $(shells_to_test); do
    rm -f "$BATS_TEST_TMPDIR/pids"
    # The command traps TERM and exits 42; the caller prints the status cvsm_run returned.
    "$sh" -c 'source "$1"; cvsm_run -- bash -c "trap \"exit 42\" TERM; echo \"\$\$ \$PPID\" >\"\$0.tmp\"; mv \"\$0.tmp\" \"\$0\"
        while :; do sleep 0.05; done" "$2"; echo "status $?"' _ "$SDK" "$BATS_TEST_TMPDIR/pids" \
      >"$BATS_TEST_TMPDIR/out" 2>&1 3>&- &
    bg=$!
    for _ in $(seq 1 200); do
      [ -s "$BATS_TEST_TMPDIR/pids" ] && break
      sleep 0.05
    done
    read -r child ppid <"$BATS_TEST_TMPDIR/pids"
    # The command is the subshell's own process (exec): its parent is the calling shell.
    [ "$ppid" -eq "$bg" ]
    kill -TERM "$child"
    wait "$bg"
    [ "$(cat "$BATS_TEST_TMPDIR/out")" = "status 42" ]
  done
}

@test "standard input, output and error are the command's" {
  run --separate-stderr cvsm_run -- sh -c 'cat; echo to-stderr >&2' <<<"from stdin"
  [ "$output" = "from stdin" ]
  [ "$stderr" = "to-stderr" ]
}

@test "options come before the command; the first other argument, or --, starts it" {
  run cvsm_run -e staging sh -c 'echo "$API_KEY" "$1"' sh --json
  [ "$output" = "k-staging --json" ]
  run -127 cvsm_run --environment=development -- -x
  run --separate-stderr cvsm_run --overwrite
  [ "$status" -eq 2 ]
  [ "$stderr" = "cvsm: usage: cvsm_run [OPTIONS] [--overwrite] -- COMMAND [ARGS...]" ]
  run --separate-stderr cvsm_run --print -- true
  [ "$status" -eq 2 ]
  [ "$stderr" = "cvsm: unknown option --print" ]
  [ "$(count_requests)" -eq 2 ]
}

@test "cvsm's own failures stop the command from starting, with the usual codes and one line" {
  run --separate-stderr env -u CVSM_TOKEN bash -c 'source "$1"; cvsm_run -- touch "$2"' _ "$SDK" "$BATS_TEST_TMPDIR/ran"
  [ "$status" -eq 2 ]
  [ "$stderr" = "cvsm: CVSM_TOKEN is not set" ]
  CVSM_BASE_URL=http://127.0.0.1:9/api/v1 CVSM_MAX_RETRIES=0 run --separate-stderr cvsm_run -- touch "$BATS_TEST_TMPDIR/ran"
  [ "$status" -eq 8 ]
  [ "$(wc -l <<<"$stderr")" -eq 1 ]
  stub_fault '[{"path": "/api/v1/teams/acme/secrets/export", "status": 403, "count": 1}]'
  run cvsm_run -- touch "$BATS_TEST_TMPDIR/ran"
  [ "$status" -eq 4 ]
  [ ! -e "$BATS_TEST_TMPDIR/ran" ]
}

@test "a secret that cannot be an environment variable: nothing runs, exit 2, naming it" {
  stub_reset '[{"id": "a", "name": "GOOD", "environment": "production", "value": "g"},
               {"id": "b", "name": "BAD-NAME", "environment": "production", "value": "secret-b"}]'
  run --separate-stderr cvsm_run -- touch "$BATS_TEST_TMPDIR/ran"
  [ "$status" -eq 2 ]
  [ "$stderr" = 'cvsm: secret "BAD-NAME" is not a valid variable name; nothing was set' ]
  [ ! -e "$BATS_TEST_TMPDIR/ran" ]
}

@test "no value is ever on a command line, and xtrace shows none" {
  run bash -c 'source "$1"; set -x; cvsm_run -- sh -c "ps -o args= -u $(id -u)"' _ "$SDK"
  [ "$status" -eq 0 ]
  [[ $output != *k-prod* ]]
  [[ $output != *db-short* ]]
  [[ $output != *"$TOKEN"* ]]
}

@test "with stale-if-error the command runs with kept values, after one warning" {
  export CVSM_CACHE_TTL=1 CVSM_STALE_IF_ERROR=30 CVSM_MAX_RETRIES=0
  cvsm_get_all >/dev/null
  sleep 1.1
  stub_fault '[{"path": "/api/v1/teams/acme/secrets/export", "status": 503, "count": 1}]'
  local rc=0
  cvsm_run -- sh -c 'echo "$DB"' >"$BATS_TEST_TMPDIR/out" 2>"$BATS_TEST_TMPDIR/err" || rc=$?
  [ "$rc" -eq 0 ]
  [ "$(cat "$BATS_TEST_TMPDIR/out")" = db-short ]
  [ "$CVSM_STALE" = 1 ]
  [[ "$(cat "$BATS_TEST_TMPDIR/err")" == "cvsm: warning: serving a stale value of every secret of production, "* ]]
  [ "$(wc -l <"$BATS_TEST_TMPDIR/err")" -eq 1 ]
}
