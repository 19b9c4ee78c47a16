#!/usr/bin/env bats
# readme.bats - README.md's first example, run exactly as printed, in bash and in zsh.

load helpers

setup() {
  common_setup
  stub_reset '[{"id": "d", "name": "DATABASE_URL", "environment": "production", "value": "postgres://u:p@h/db"},
               {"id": "a", "name": "API_KEY", "environment": "production", "value": "k-prod"},
               {"id": "m", "name": "MULTI", "environment": "production", "value": "line1\nline2\n"},
               {"id": "q", "name": "QUOTE", "environment": "production", "value": "it'\''s $(touch PWNED)"}]'
  # The example's layout: a project folder next to a clone in ../cvsm, as the README says; the
  # example copies cvsm.sh into the project itself.
  mkdir -p "$BATS_TEST_TMPDIR/app" "$BATS_TEST_TMPDIR/cvsm/clients/shell"
  cp "$SDK" "$BATS_TEST_TMPDIR/cvsm/clients/shell/cvsm.sh"
  # The app reports the environment it was started with.
  printf '#!/bin/sh\nexec jq -n "env | {DATABASE_URL, API_KEY, MULTI, QUOTE}"\n' >"$BATS_TEST_TMPDIR/app/my-app"
  chmod +x "$BATS_TEST_TMPDIR/app/my-app"
}

# first_example prints the first ```bash block of README.md.
first_example() {
  awk '/^```bash$/ { inside = 1; next } inside && /^```$/ { exit } inside { print }' "$BATS_TEST_DIRNAME/../README.md"
}

@test "the README's first example is a bash block that reads a value and injects before running the app" {
  run first_example
  [ "$status" -eq 0 ]
  [[ $output == *'cvsm_get DATABASE_URL'* ]]
  [[ $output == *'cvsm_inject && exec ./my-app'* ]]
  # The pitfall the README warns about is not in it.
  [[ $output != *'eval "$(cvsm_get_all)"'* ]]
}

@test "the README's first example, run as printed, starts the app with every secret exported" {
  local example sh
  example=$(first_example)
  for sh in $(shells_to_test); do
    rm -rf "$CVSM_CACHE_DIR"
    run --separate-stderr bash -c 'cd "$1" && exec "$2" -c "$3"' _ "$BATS_TEST_TMPDIR/app" "$sh" "$example"
    [ "$status" -eq 0 ]
    [ "$stderr" = "" ]
    [ "$(jq -r .DATABASE_URL <<<"$output")" = "postgres://u:p@h/db" ]
    [ "$(jq -r .API_KEY <<<"$output")" = k-prod ]
    [ "$(jq -c .MULTI <<<"$output")" = '"line1\nline2\n"' ]
    [ "$(jq -r .QUOTE <<<"$output")" = "it's \$(touch PWNED)" ]
    [ ! -e "$BATS_TEST_TMPDIR/app/PWNED" ]
  done
  # Each run read DATABASE_URL on its own (cvsm_get), then the whole environment (cvsm_inject).
  [ "$(count_requests /by-name/DATABASE_URL)" -eq "$(shells_to_test | wc -l)" ]
  [ "$(count_requests /export)" -eq "$(shells_to_test | wc -l)" ]
}

@test "a variable already exported when the example runs is kept" {
  API_KEY=mine run --separate-stderr bash -c 'cd "$1" && exec bash -c "$2"' _ "$BATS_TEST_TMPDIR/app" "$(first_example)"
  [ "$status" -eq 0 ]
  [ "$(jq -r .API_KEY <<<"$output")" = mine ]
  [ "$(jq -r .DATABASE_URL <<<"$output")" = "postgres://u:p@h/db" ]
}

@test "the Service token section's cvsm_run example runs as printed, the token read from a file" {
  local example
  example=$(awk '/^```bash$/ { inside = 1; block = ""; next }
    inside && /^```$/ { inside = 0; if (block ~ /cvsm_run -- \.\/app/) { printf "%s", block; exit } next }
    inside { block = block $0 "\n" }' "$BATS_TEST_DIRNAME/../README.md")
  [[ $example == *'CVSM_TOKEN=$(cat cvsm-token) CVSM_BASE_URL=$CVSM CVSM_TEAM=acme cvsm_run -- ./app'* ]]
  printf '%s\n' "$TOKEN" >"$BATS_TEST_TMPDIR/app/cvsm-token"
  cp "$BATS_TEST_TMPDIR/app/my-app" "$BATS_TEST_TMPDIR/app/app"
  cp "$SDK" "$BATS_TEST_TMPDIR/app/cvsm.sh"  # copied into the project, as Installation says
  unset CVSM_TOKEN CVSM_TEAM
  CVSM=$CVSM_BASE_URL run --separate-stderr env -u CVSM_BASE_URL bash -c 'cd "$1" && eval "$2"' _ "$BATS_TEST_TMPDIR/app" "$example"
  [ "$status" -eq 0 ]
  [ "$stderr" = "" ]
  [ "$(jq -r .DATABASE_URL <<<"$output")" = "postgres://u:p@h/db" ]
  [ "$(stub_requests | jq -r '.[0].headers.authorization')" = "Bearer $TOKEN" ]
}
