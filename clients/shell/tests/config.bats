#!/usr/bin/env bats
# config.bats - configuration from the CVSM_* variables and options, configuration errors,
# cvsm_check_config, cvsm_describe, and usage errors.

load helpers

setup_file() { stub_start; }
teardown_file() { stub_stop; }
setup() { common_setup; }

@test "a missing CVSM_TOKEN, CVSM_BASE_URL or CVSM_TEAM is a configuration error naming the variable" {
  local var
  for var in CVSM_TOKEN CVSM_BASE_URL CVSM_TEAM; do
    (
      unset "$var"
      run --separate-stderr cvsm_get API_KEY
      [ "$status" -eq 2 ]
      [ "$stderr" = "cvsm: $var is not set" ]
      run --separate-stderr cvsm_check_config
      [ "$status" -eq 2 ]
      [ "$stderr" = "cvsm: $var is not set" ]
    )
  done
  [ "$(count_requests)" -eq 0 ]
}

@test "an empty variable counts as unset" {
  CVSM_TOKEN='' run --separate-stderr cvsm_check_config
  [ "$status" -eq 2 ]
  [ "$stderr" = "cvsm: CVSM_TOKEN is not set" ]
  CVSM_ENVIRONMENT='' CVSM_CACHE_TTL='' run cvsm_describe --json
  [ "$(jq -c '[.environment, .cache_ttl]' <<<"$output")" = '["production",30]' ]
}

@test "a CVSM_CACHE_TTL that is not a non-negative integer is a configuration error" {
  local bad
  for bad in -1 abc 1.5 ' 3' 1e3 9999999999; do
    CVSM_CACHE_TTL=$bad run --separate-stderr cvsm_check_config
    [ "$status" -eq 2 ]
    [ "$stderr" = "cvsm: CVSM_CACHE_TTL must be a non-negative integer (seconds)" ]
  done
  CVSM_CACHE_TTL=007 run cvsm_describe --json
  [ "$(jq .cache_ttl <<<"$output")" = 7 ]
}

@test "a bad timeout, retry count or base URL is a configuration error" {
  CVSM_TIMEOUT=0 run cvsm_check_config
  [ "$status" -eq 2 ]
  CVSM_TIMEOUT=-3 run cvsm_check_config
  [ "$status" -eq 2 ]
  CVSM_TIMEOUT=fast run cvsm_check_config
  [ "$status" -eq 2 ]
  CVSM_MAX_RETRIES=two run cvsm_check_config
  [ "$status" -eq 2 ]
  CVSM_BASE_URL=ftp://example.com run --separate-stderr cvsm_check_config
  [ "$status" -eq 2 ]
  [ "$stderr" = "cvsm: CVSM_BASE_URL must start with http:// or https://" ]
  run --separate-stderr cvsm_check_config --cache-ttl x
  [ "$stderr" = "cvsm: --cache-ttl must be a non-negative integer (seconds)" ]
}

@test "a token with spaces or quotes is refused without being printed" {
  CVSM_TOKEN='abc "def' run --separate-stderr cvsm_check_config
  [ "$status" -eq 2 ]
  [ "$stderr" = "cvsm: CVSM_TOKEN contains characters a token cannot have" ]
}

@test "cvsm_check_config succeeds on a complete configuration and makes no request" {
  run cvsm_check_config
  [ "$status" -eq 0 ]
  [ "$output" = "" ]
  [ "$(count_requests)" -eq 0 ]
}

@test "cvsm_describe prints the effective configuration and never the token" {
  export CVSM_ENVIRONMENT=staging CVSM_CACHE_TTL=5 CVSM_TIMEOUT=2.50 CVSM_MAX_RETRIES=4
  run cvsm_describe
  [ "$status" -eq 0 ]
  [ "$output" = "cvsm-shell/0.1.0
base_url=$(stub_url)/api/v1
team=acme
environment=staging
cache_ttl=5
timeout=2.5
max_retries=4
token=<hidden>
cache_dir=$CVSM_CACHE_DIR" ]
  [[ $output != *"$TOKEN"* ]]
  [ "$(count_requests)" -eq 0 ]
}

@test "cvsm_describe --json has the protocol's keys and types, defaults included" {
  run cvsm_describe --json
  [ "$status" -eq 0 ]
  [ "$output" = "{\"base_url\":\"$(stub_url)/api/v1\",\"team\":\"acme\",\"environment\":\"production\",\"cache_ttl\":30,\"timeout\":10,\"max_retries\":2}" ]
}

@test "options win over the variables" {
  export CVSM_ENVIRONMENT=staging CVSM_CACHE_TTL=5 CVSM_TIMEOUT=3 CVSM_MAX_RETRIES=4 CVSM_TEAM=x
  run cvsm_describe --json --environment development --cache-ttl 0 --timeout 1.5 \
    --max-retries 0 --team acme --base-url http://example.com/api/v1/
  [ "$output" = '{"base_url":"http://example.com/api/v1","team":"acme","environment":"development","cache_ttl":0,"timeout":1.5,"max_retries":0}' ]
}

@test "cvsm_describe hides a user:password part of the base URL" {
  CVSM_BASE_URL=https://user:pw@example.com/api/v1 run cvsm_describe
  [[ $output == *"base_url=https://***@example.com/api/v1"* ]]
  [[ $output != *"pw"* ]]
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
  run cvsm_get ''
  [ "$status" -eq 2 ]
  [ "$(count_requests)" -eq 0 ]
}

@test "-- ends the options so a name may follow it" {
  run cvsm_get -- API_KEY
  [ "$output" = "k-prod" ]
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
