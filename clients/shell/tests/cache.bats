#!/usr/bin/env bats
# cache.bats - the file cache: hits, expiry, keys, clearing, authentication errors, a private cache
# directory only under $XDG_RUNTIME_DIR (or CVSM_CACHE_DIR), swept of expired entries on every call.

load helpers

mode_of() { stat -c '%a' "$1"; }

@test "the --cache-ttl option wins over CVSM_CACHE_TTL" {
  export CVSM_CACHE_TTL=60
  cvsm_get --cache-ttl 0 API_KEY >/dev/null
  cvsm_get --cache-ttl 0 API_KEY >/dev/null
  [ "$(count_requests /by-name/API_KEY)" -eq 2 ]
}

@test "cvsm_clear_cache needs no configuration and succeeds when there is no cache yet" {
  unset CVSM_TOKEN CVSM_BASE_URL CVSM_TEAM
  run cvsm_clear_cache
  [ "$status" -eq 0 ]
  run cvsm_clear_cache extra
  [ "$status" -eq 2 ]
}

@test "the cache is keyed by environment" {
  [ "$(cvsm_get API_KEY)" = "k-prod" ]
  [ "$(CVSM_ENVIRONMENT=staging cvsm_get API_KEY)" = "k-staging" ]
  [ "$(cvsm_get API_KEY)" = "k-prod" ]
  [ "$(stub_requests | jq -c '[.[] | .query]')" = '["environment=production","environment=staging"]' ]
}

@test "the cache is keyed by token: another token never reads cached values" {
  cvsm_get API_KEY >/dev/null
  CVSM_TOKEN=$OTHER_TOKEN run cvsm_get API_KEY
  [ "$status" -eq 3 ]
  [ "$output" != "k-prod" ]
}

@test "the cache directory is created with mode 0700 and its files with mode 0600, never holding the token" {
  cvsm_get API_KEY >/dev/null
  cvsm_get_all >/dev/null
  [ "$(mode_of "$CVSM_CACHE_DIR")" = 700 ]
  [ "$(mode_of "$CVSM_CACHE_DIR/values")" = 700 ]
  [ "$(find "$CVSM_CACHE_DIR" -type f | wc -l)" -eq 2 ]
  [ -z "$(find "$CVSM_CACHE_DIR" -type f ! -perm 600)" ]
  [ -z "$(find "$CVSM_CACHE_DIR" -type d ! -perm 700)" ]
  run grep -r -- "$TOKEN" "$CVSM_CACHE_DIR"
  [ "$status" -eq 1 ]
}

@test "by default the cache lives in \$XDG_RUNTIME_DIR/cvsm-\$UID, with mode 0700" {
  unset CVSM_CACHE_DIR
  export XDG_RUNTIME_DIR="$BATS_TEST_TMPDIR/run"
  mkdir -m 700 "$XDG_RUNTIME_DIR"
  cvsm_get API_KEY >/dev/null
  cvsm_get API_KEY >/dev/null
  [ "$(count_requests /by-name/API_KEY)" -eq 1 ]
  [ "$(mode_of "$XDG_RUNTIME_DIR/cvsm-$UID")" = 700 ]
  run cvsm_describe
  [[ $output == *"cache_dir=$XDG_RUNTIME_DIR/cvsm-$UID"* ]]
}

@test "without XDG_RUNTIME_DIR nothing is written to disk and every call asks the server" {
  unset CVSM_CACHE_DIR XDG_RUNTIME_DIR
  mkdir "$BATS_TEST_TMPDIR/home"
  export HOME="$BATS_TEST_TMPDIR/home" TMPDIR="$BATS_TEST_TMPDIR/tmp"
  mkdir "$TMPDIR"
  touch "$BATS_TEST_TMPDIR/before"
  [ "$(cvsm_get API_KEY)" = k-prod ]
  [ "$(cvsm_get API_KEY)" = k-prod ]
  cvsm_get_all >/dev/null
  cvsm_inject
  [ "$(count_requests /by-name/API_KEY)" -eq 2 ]
  [ "$(count_requests /export)" -eq 2 ]
  # Nothing new anywhere we could write: not in TMPDIR, HOME, the working directory or /tmp.
  [ -z "$(find "$TMPDIR" "$HOME" "$PWD" -newer "$BATS_TEST_TMPDIR/before" 2>/dev/null)" ]
  [ -z "$(ls -A "$TMPDIR")" ]
  [ ! -e "/tmp/cvsm-$UID" ]
  run cvsm_describe
  [[ $output == *"cache_dir=none"* ]]
}

@test "an XDG_RUNTIME_DIR that is relative, missing or not yours is not used" {
  unset CVSM_CACHE_DIR
  cd "$BATS_TEST_TMPDIR"
  mkdir -m 700 rel
  for XDG_RUNTIME_DIR in rel "$BATS_TEST_TMPDIR/missing"; do
    export XDG_RUNTIME_DIR
    run cvsm_get API_KEY
    [ "$output" = k-prod ]
  done
  [ -z "$(ls -A rel)" ]
  [ ! -e missing ]
  if [ "$(id -u)" = 0 ]; then
    mkdir -m 700 "$BATS_TEST_TMPDIR/other"
    chown nobody "$BATS_TEST_TMPDIR/other"
    XDG_RUNTIME_DIR="$BATS_TEST_TMPDIR/other" run cvsm_get API_KEY
    [ "$output" = k-prod ]
    [ -z "$(ls -A "$BATS_TEST_TMPDIR/other")" ]
  fi
}

@test "every call sweeps expired entries from the cache, even one that reads nothing" {
  export CVSM_CACHE_TTL=3
  cvsm_get API_KEY >/dev/null
  cvsm_get_all >/dev/null
  [ "$(find "$CVSM_CACHE_DIR/values" -type f | wc -l)" -eq 2 ]
  sleep 3.1
  cvsm_check_config
  [ "$(find "$CVSM_CACHE_DIR/values" -type f | wc -l)" -eq 0 ]
}

@test "team ids an older version remembered are swept at their time, and nothing asks /teams" {
  mkdir -m 700 "$CVSM_CACHE_DIR" "$CVSM_CACHE_DIR/teams"
  echo "$TEAM_ID" >"$CVSM_CACHE_DIR/teams/0123abcdef.1000"
  echo "$TEAM_ID" >"$CVSM_CACHE_DIR/teams/0123abcdef.99999999999999"
  cvsm_get API_KEY >/dev/null
  [ "$(ls "$CVSM_CACHE_DIR/teams")" = 0123abcdef.99999999999999 ]
  [ "$(count_requests /teams)" -eq 0 ]
}

@test "an entry's file name ends in its fetch time and its expiry time (TTL + stale-if-error), in milliseconds" {
  local before after f fetched
  before=$(($(date +%s) * 1000))
  cvsm_get API_KEY >/dev/null
  after=$(($(date +%s) * 1000 + 1000))
  f=$(find "$CVSM_CACHE_DIR/values" -type f)
  fetched=${f%.*}
  fetched=${fetched##*.}
  [ "$fetched" -ge "$before" ] && [ "$fetched" -le "$after" ]
  [ "${f##*.}" -eq "$((fetched + 30000))" ]
  cvsm_clear_cache
  CVSM_STALE_IF_ERROR=45 cvsm_get API_KEY >/dev/null
  f=$(find "$CVSM_CACHE_DIR/values" -type f)
  fetched=${f%.*}
  fetched=${fetched##*.}
  [ "${f##*.}" -eq "$((fetched + 75000))" ]
}

@test "a file an older version left in the cache directory is swept" {
  mkdir -m 700 "$CVSM_CACHE_DIR" "$CVSM_CACHE_DIR/values"
  echo '{"exp":99999999999999,"value":"old"}' >"$CVSM_CACHE_DIR/values/0123abcdef"
  cvsm_check_config
  [ -z "$(ls -A "$CVSM_CACHE_DIR/values")" ]
}

@test "the cache an older version kept in \$TMPDIR/cvsm-\$UID is removed by the next call" {
  unset CVSM_CACHE_DIR XDG_RUNTIME_DIR
  mkdir -m 700 "$TMPDIR/cvsm-$UID" "$TMPDIR/cvsm-$UID/values" "$TMPDIR/cvsm-$UID/teams"
  echo '{"exp":1,"value":"old"}' >"$TMPDIR/cvsm-$UID/values/0123abcdef"
  cvsm_describe >/dev/null
  [ ! -e "$TMPDIR/cvsm-$UID" ]
}

@test "an older version's cache that is a symlink or not a directory is left alone" {
  unset CVSM_CACHE_DIR XDG_RUNTIME_DIR
  mkdir -p "$BATS_TEST_TMPDIR/target/values"
  ln -s "$BATS_TEST_TMPDIR/target" "$TMPDIR/cvsm-$UID"
  cvsm_describe >/dev/null
  [ -d "$BATS_TEST_TMPDIR/target/values" ]
}

@test "a cache directory that others can read is refused with a configuration error" {
  mkdir -m 755 "$CVSM_CACHE_DIR"
  run --separate-stderr cvsm_get API_KEY
  [ "$status" -eq 2 ]
  [[ $stderr == *"must have mode 0700"* ]]
  [ "$(count_requests)" -eq 0 ]
  run cvsm_clear_cache
  [ "$status" -eq 2 ]
}

@test "a cache directory that is a symlink is refused" {
  mkdir -m 700 "$BATS_TEST_TMPDIR/elsewhere"
  ln -s "$BATS_TEST_TMPDIR/elsewhere" "$CVSM_CACHE_DIR"
  run --separate-stderr cvsm_get API_KEY
  [ "$status" -eq 2 ]
  [[ $stderr == *"is not a directory owned by you"* ]]
  [ -z "$(ls -A "$BATS_TEST_TMPDIR/elsewhere")" ]
}

@test "a cache directory owned by someone else is refused" {
  [ "$(id -u)" = 0 ] || skip "needs root to create a directory owned by another user"
  mkdir -m 700 "$CVSM_CACHE_DIR"
  chown nobody "$CVSM_CACHE_DIR"
  run --separate-stderr cvsm_get API_KEY
  [ "$status" -eq 2 ]
  [[ $stderr == *"is not a directory owned by you"* ]]
}

# That CVSM_CACHE_TTL=0 asks the server every time is the conformance case cache_ttl_zero_disables_cache.
@test "an unusable cache directory does not matter when caching is off, and nothing is written" {
  mkdir -m 755 "$CVSM_CACHE_DIR"
  CVSM_CACHE_TTL=0 run cvsm_get API_KEY
  [ "$status" -eq 0 ]
  [ "$output" = "k-prod" ]
  [ -z "$(ls -A "$CVSM_CACHE_DIR")" ]
}

@test "the caller's noclobber option does not stop the cache from being refreshed" {
  set -C
  export CVSM_CACHE_TTL=3
  cvsm_get API_KEY >/dev/null
  sleep 3.1
  cvsm_get API_KEY >/dev/null
  cvsm_get API_KEY >/dev/null
  set +C
  [ "$(count_requests /by-name/API_KEY)" -eq 2 ]
}

@test "concurrent calls from one shell all succeed and leave only complete cache files" {
  local i
  for i in $(seq 1 8); do
    (cvsm_get API_KEY >"$BATS_TEST_TMPDIR/out.$i"; cvsm_get_all --json >"$BATS_TEST_TMPDIR/all.$i") &
  done
  wait
  for i in $(seq 1 8); do
    [ "$(cat "$BATS_TEST_TMPDIR/out.$i")" = k-prod ]
    [ "$(jq -r .DB "$BATS_TEST_TMPDIR/all.$i")" = db-short ]
  done
  # One entry per key, or a few fresh copies when calls raced; each complete, and used.
  [ "$(find "$CVSM_CACHE_DIR/values" -type f | wc -l)" -ge 2 ]
  [ "$(find "$CVSM_CACHE_DIR/values" -type f -name '.*' | wc -l)" -eq 0 ]
  find "$CVSM_CACHE_DIR/values" -type f -exec jq -e . {} + >/dev/null
  local before
  before=$(count_requests)
  cvsm_get API_KEY >/dev/null
  cvsm_get_all >/dev/null
  [ "$(count_requests)" -eq "$before" ]
}

@test "writing an entry removes its copies fetched before it, and keeps one a racing call fetched later" {
  local _cvsm_root=$CVSM_CACHE_DIR _cvsm_now=0 _cvsm_ttl=60 _cvsm_sie=0 later
  mkdir -m 700 "$_cvsm_root" "$_cvsm_root/values"
  later=$(($(date +%s) * 1000 + 5000))
  echo '"old"' >"$_cvsm_root/values/abc.1000.99999999999999"
  echo '"legacy"' >"$_cvsm_root/values/abc.99999999999999"
  echo '"later"' >"$_cvsm_root/values/abc.$later.99999999999999"
  _cvsm_cache_put values abc '"now"'
  [ "$(find "$_cvsm_root/values" -name 'abc.*' | wc -l)" -eq 2 ]
  [ -e "$_cvsm_root/values/abc.$later.99999999999999" ]
  # The copy fetched last is the one read.
  _cvsm_cache_find values abc fresh
  [ "$_cvsm_result" = "$_cvsm_root/values/abc.$later.99999999999999" ]
  rm "$_cvsm_result"
  _cvsm_cache_find values abc fresh
  [ "$(jq -r . "$_cvsm_result")" = now ]
}
