#!/usr/bin/env bats
# config.bats - configuration from the CVSM_* variables and options, configuration errors,
# cvsm_check_config, cvsm_describe, and usage errors.

load helpers

# A bad CVSM_TIMEOUT, CVSM_MAX_RETRIES, CVSM_CACHE_TTL or CVSM_BASE_URL and a blank CVSM_TOKEN are
# the conformance cases invalid_timeout_or_retries_is_configuration_error,
# invalid_cache_ttl_is_configuration_error and unusable_token_or_base_url_is_configuration_error.
@test "a bad --cache-ttl is a configuration error" {
  run --separate-stderr cvsm_check_config --cache-ttl x
  [ "$status" -eq 2 ]
  [ "$stderr" = "cvsm: --cache-ttl must be a non-negative integer (seconds)" ]
}

@test "an unreadable CA file or curl config is a configuration error at construction" {
  local src
  for src in CVSM_CA_FILE CVSM_CURL_CONFIG; do
    (
      export "$src=$BATS_TEST_TMPDIR/missing.pem"
      run --separate-stderr cvsm_check_config
      [ "$status" -eq 2 ]
      [ "$stderr" = "cvsm: $src: cannot read $BATS_TEST_TMPDIR/missing.pem" ]
      export "$src=$BATS_TEST_TMPDIR"
      run --separate-stderr cvsm_get API_KEY
      [ "$status" -eq 2 ]
      [ "$stderr" = "cvsm: $src: cannot read $BATS_TEST_TMPDIR" ]
    )
  done
  run --separate-stderr cvsm_check_config --ca-file "$BATS_TEST_TMPDIR/missing.pem"
  [ "$stderr" = "cvsm: --ca-file: cannot read $BATS_TEST_TMPDIR/missing.pem" ]
  run --separate-stderr cvsm_check_config --curl-config=/nonexistent
  [ "$stderr" = "cvsm: --curl-config: cannot read /nonexistent" ]
  [ "$(count_requests)" -eq 0 ]
}

@test "an empty CVSM_CA_FILE counts as unset" {
  CVSM_CA_FILE='' run cvsm_get API_KEY
  [ "$output" = k-prod ]
}

@test "cvsm_version prints the version, which is the one in the user agent and in cvsm_describe" {
  run cvsm_version
  [ "$status" -eq 0 ]
  [[ $output =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]]
  local version=$output
  run cvsm_describe
  [ "${lines[0]}" = "cvsm-shell/$version" ]
  cvsm_get API_KEY >/dev/null
  [ "$(stub_requests | jq -r '.[0].headers["user-agent"]')" = "cvsm-shell/$version" ]
  run cvsm_version --json
  [ "$status" -eq 2 ]
}

@test "cvsm_check_config succeeds on a complete configuration and makes no request" {
  run cvsm_check_config
  [ "$status" -eq 0 ]
  [ "$output" = "" ]
  [ "$(count_requests)" -eq 0 ]
}

# cvsm_describe --json is what the conformance driver reports (default_configuration_reported and
# every case that configures a client); a name after -- is how it calls cvsm_get.
@test "cvsm_describe prints the effective configuration and never the token" {
  export CVSM_ENVIRONMENT=staging CVSM_CACHE_TTL=5 CVSM_TIMEOUT=2.50 CVSM_MAX_RETRIES=4 CVSM_STALE_IF_ERROR=0300
  touch "$BATS_TEST_TMPDIR/ca.pem"
  export CVSM_CA_FILE="$BATS_TEST_TMPDIR/ca.pem"
  run cvsm_describe
  [ "$status" -eq 0 ]
  [ "$output" = "cvsm-shell/$(cvsm_version)
base_url=$(stub_url)/api/v1
team=acme
environment=staging
cache_ttl=5
stale_if_error=300
timeout=2.5
max_retries=4
ca_file=$BATS_TEST_TMPDIR/ca.pem
curl_config=
token=<hidden>
cache_dir=$CVSM_CACHE_DIR" ]
  [[ $output != *"$TOKEN"* ]]
  [ "$(count_requests)" -eq 0 ]
}

@test "cvsm_describe hides a user:password part of the base URL" {
  CVSM_BASE_URL=https://user:pw@example.com/api/v1 run cvsm_describe
  [[ $output == *"base_url=https://***@example.com/api/v1"* ]]
  [[ $output != *":pw@"* ]]
}

@test "usage errors are exit 2 with one line on stderr" {
  run --separate-stderr cvsm_get
  [ "$status" -eq 2 ]
  [ "$stderr" = "cvsm: usage: cvsm_get [OPTIONS] NAME" ]
  run --separate-stderr cvsm_get A B
  [ "$status" -eq 2 ]
  run --separate-stderr cvsm_get --bogus A
  [ "$stderr" = "cvsm: unknown option --bogus" ]
  run --separate-stderr cvsm_get --environment
  [ "$stderr" = "cvsm: option --environment needs a value" ]
  run cvsm_get_all --overwrite
  [ "$status" -eq 2 ]
  run cvsm_inject --json
  [ "$status" -eq 2 ]
  run --separate-stderr cvsm_clear_cache --team x
  [ "$stderr" = "cvsm: cvsm_clear_cache takes no options" ]
  [ "$(count_requests)" -eq 0 ]
}

@test "a missing jq is a configuration error" {
  mkdir "$BATS_TEST_TMPDIR/bin"
  ln -s "$(command -v curl)" "$BATS_TEST_TMPDIR/bin/curl"
  local rc=0 saved=$PATH
  PATH="$BATS_TEST_TMPDIR/bin"
  cvsm_get API_KEY 2>"$BATS_TEST_TMPDIR/err" || rc=$?
  PATH=$saved
  [ "$rc" -eq 2 ]
  [ "$(cat "$BATS_TEST_TMPDIR/err")" = "cvsm: jq is required but was not found on PATH" ]
}
