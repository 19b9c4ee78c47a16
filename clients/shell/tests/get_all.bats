#!/usr/bin/env bats
# get_all.bats - cvsm_get_all (shell-quoted lines and --json) and cvsm_inject (keep/overwrite).

load helpers

@test "cvsm_get_all prints NAME='value' lines sorted by name, single-quoted" {
  run cvsm_get_all
  [ "$status" -eq 0 ]
  [ "${lines[0]}" = "API_KEY='k-prod'" ]
  [ "${lines[1]}" = "DB='db-short'" ]
  [ "${lines[2]}" = "DB_URL='postgres://u:p@h/db'" ]
  [ "${lines[3]}" = "EMPTY=''" ]
  [ "${lines[4]}" = "MULTI='line1" ]
  [[ $output == *"QUOTE='it'\\''s \"q\" \$(touch PWNED) \`id\` \\ \$HOME'"* ]]
}

@test "the output of cvsm_get_all reads back to the same values with eval, in bash and in zsh" {
  cvsm_get_all --json >"$BATS_TEST_TMPDIR/want.json"
  local sh
  for sh in $(shells_to_test); do
    run "$sh" -c 'cd "$2" && source "$1" && eval "$(cvsm_get_all)" &&
      jq -n --arg a "$API_KEY" --arg d "$DB" --arg u "$DB_URL" --arg e "$EMPTY" --arg m "$MULTI" \
        --arg q "$QUOTE" --arg n "$UNICODE" \
        "{API_KEY: \$a, DB: \$d, DB_URL: \$u, EMPTY: \$e, MULTI: \$m, QUOTE: \$q, UNICODE: \$n}"' \
      _ "$SDK" "$BATS_TEST_TMPDIR"
    [ "$status" -eq 0 ]
    # $(...) drops MULTI's trailing newlines; everything else must be identical.
    [ "$(jq -S 'del(.MULTI)' <<<"$output")" = "$(jq -S 'del(.MULTI)' "$BATS_TEST_TMPDIR/want.json")" ]
    [ "$(jq -r .MULTI <<<"$output")" = "$(printf 'line1\nline2')" ]
    [ ! -e "$BATS_TEST_TMPDIR/PWNED" ]
  done
}

@test "eval of cvsm_get_all keeps trailing newlines of values (no command substitution involved)" {
  cvsm_get_all >"$BATS_TEST_TMPDIR/vars"
  # shellcheck disable=SC1091
  . "$BATS_TEST_TMPDIR/vars"
  # shellcheck disable=SC2153
  [ "$MULTI" = $'line1\nline2\n\n' ]
}

@test "a name that is not a variable name becomes a comment line, so eval stays safe" {
  stub_reset '[{"id": "a", "name": "GOOD", "environment": "production", "value": "1"},
               {"id": "b", "name": "X=1;touch PWNED;Y", "environment": "production", "value": "2"},
               {"id": "c", "name": "$(touch PWNED)\nZ", "environment": "production", "value": "3"}]'
  cd "$BATS_TEST_TMPDIR"
  run cvsm_get_all
  [ "$status" -eq 0 ]
  [ "${#lines[@]}" -eq 3 ]
  [ "${lines[0]}" = '# cvsm: skipped "$(touch PWNED)\nZ": not a valid variable name' ]
  [ "${lines[1]}" = "GOOD='1'" ]
  [ "${lines[2]}" = '# cvsm: skipped "X=1;touch PWNED;Y": not a valid variable name' ]
  eval "$output"
  [ "$GOOD" = 1 ]
  [ ! -e PWNED ]
}

@test "cvsm_get_all of an empty environment prints nothing" {
  stub_reset '[]'
  run cvsm_get_all
  [ "$status" -eq 0 ]
  [ "$output" = "" ]
}

@test "cvsm_inject exports every secret to the programs the calling shell starts, and prints nothing" {
  run cvsm_inject
  [ "$output" = "" ]
  cvsm_inject
  [ "$(bash -c 'printf %s "$QUOTE"')" = "it's \"q\" \$(touch PWNED) \`id\` \\ \$HOME" ]
}

# --print, --overwrite, keeping a variable already set (even empty), and --json's values are the
# conformance cases inject_sets_the_environment and values_round_trip (the driver calls
# cvsm_inject --print [--overwrite] and cvsm_get_all --json).
@test "cvsm_inject warns when it keeps a variable that is set but not exported" {
  for sh in $(shells_to_test); do
    run --separate-stderr "$sh" -c 'source "$1"; eval "$(cvsm_get_all)"; export DB; cvsm_inject --print' _ "$SDK"
    [ "$status" -eq 0 ]
    [ "$output" = "" ]
    [[ $stderr == *"cvsm: warning: kept API_KEY: it is set in this shell but not exported, so programs started from it do not see it (export it, or use --overwrite)"* ]]
    [[ $stderr != *"kept DB:"* ]]
    [ "$(grep -c 'warning: kept' <<<"$stderr")" -eq 6 ]
  done
}

@test "a name ending in a newline is not a variable name: nothing runs, nothing is set" {
  cd "$BATS_TEST_TMPDIR"
  stub_reset '[{"id": "a", "name": "X\n", "environment": "production", "value": "touch PWNED"},
               {"id": "b", "name": "Y", "environment": "production", "value": "1"}]'
  run cvsm_get_all
  [ "$status" -eq 0 ]
  [ "${lines[0]}" = '# cvsm: skipped "X\n": not a valid variable name' ]
  eval "$output"
  run cvsm_inject --overwrite
  [ "$status" -eq 2 ]
  [ ! -e PWNED ]
}

@test "cvsm_inject skips names that are special to the shell or private to cvsm" {
  stub_reset '[{"id": "a", "name": "SECONDS", "environment": "production", "value": "1"},
               {"id": "b", "name": "_cvsm_names", "environment": "production", "value": "2"},
               {"id": "c", "name": "FINE", "environment": "production", "value": "3"}]'
  run --separate-stderr cvsm_inject --overwrite --print
  [ "$status" -eq 0 ]
  [ "$output" = "FINE" ]
  [[ $stderr == *"cvsm: warning: skipped SECONDS: special to the shell"* ]]
  [[ $stderr == *"cvsm: warning: skipped _cvsm_names: special to the shell"* ]]
}

@test "cvsm_inject does not fail on a read-only variable, it warns and goes on" {
  # shellcheck disable=SC2034 # read-only on purpose
  readonly RO_SECRET=fixed
  stub_reset '[{"id": "a", "name": "RO_SECRET", "environment": "production", "value": "1"},
               {"id": "c", "name": "FINE", "environment": "production", "value": "3"}]'
  run --separate-stderr cvsm_inject --overwrite --print
  [ "$status" -eq 0 ]
  [ "$output" = "FINE" ]
  [[ $stderr == *"skipped RO_SECRET"* ]]
}

@test "a failing cvsm_inject returns its code and sets nothing" {
  stub_fault '[{"path": "/api/v1/teams/acme/secrets/export", "status": 403, "count": 1}]'
  local rc=0
  cvsm_inject 2>/dev/null || rc=$?
  [ "$rc" -eq 4 ]
  [ -z "${API_KEY+x}" ]
  cvsm_inject
  [ "$API_KEY" = k-prod ]
}
