# shellcheck shell=bash
# helpers.bash - shared setup for the shell SDK's bats tests: starts the shared stub API (conformance/stub.py)
# once per test file, resets its data before each test, and reads back what the SDK sent. A test
# file that loads it gets the hooks below; it may define its own after `load helpers`.

bats_require_minimum_version 1.5.0

# Constants used by the test files.
# shellcheck disable=SC2034
SDK="$BATS_TEST_DIRNAME/../cvsm.sh"
# shellcheck disable=SC2034
DRIVER="$BATS_TEST_DIRNAME/../conformance/driver.sh"
TEAM_ID=11111111-2222-3333-4444-555555555555
TOKEN=cvsm_0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef
# shellcheck disable=SC2034
OTHER_TOKEN=cvsm_fedcba9876543210fedcba9876543210fedcba9876543210fedcba98765432

# stub_start [CERT KEY] starts the stub API on a free port (call from setup_file); with CERT and KEY
# it speaks HTTPS.
# shellcheck disable=SC2120 # tls.bats passes CERT and KEY
stub_start() {
  python3 "$BATS_TEST_DIRNAME/../../../conformance/stub.py" "$BATS_FILE_TMPDIR/port" "$@" >/dev/null 2>&1 3>&- &
  echo $! >"$BATS_FILE_TMPDIR/pid"
  for _ in $(seq 1 100); do
    [ -s "$BATS_FILE_TMPDIR/port" ] && return 0
    sleep 0.05
  done
  echo "stub server did not start" >&2
  return 1
}

# stub_stop stops the stub API (call from teardown_file).
stub_stop() { kill "$(cat "$BATS_FILE_TMPDIR/pid")" 2>/dev/null || true; }

# stub_url prints the stub API's root URL (STUB_SCHEME: http unless set).
stub_url() { echo "${STUB_SCHEME:-http}://127.0.0.1:$(cat "$BATS_FILE_TMPDIR/port")"; }

# stub_reset [SECRETS_JSON]: replaces the stub's data (default: the fixture below) and forgets
# recorded requests and faults.
# shellcheck disable=SC2120 # the test files pass SECRETS_JSON
stub_reset() {
  local secrets=${1:-}
  if [ -z "$secrets" ]; then
    secrets=$(
      cat <<'EOF'
[
 {"id": "s-api", "name": "API_KEY", "environment": "production", "value": "k-prod"},
 {"id": "s-api-st", "name": "API_KEY", "environment": "staging", "value": "k-staging"},
 {"id": "s-api-dev", "name": "API_KEY", "environment": "development", "value": "k-dev"},
 {"id": "s-db", "name": "DB", "environment": "production", "value": "db-short"},
 {"id": "s-dburl", "name": "DB_URL", "environment": "production", "value": "postgres://u:p@h/db"},
 {"id": "s-multi", "name": "MULTI", "environment": "production", "value": "line1\nline2\n\n"},
 {"id": "s-empty", "name": "EMPTY", "environment": "production", "value": ""},
 {"id": "s-quote", "name": "QUOTE", "environment": "production", "value": "it's \"q\" $(touch PWNED) `id` \\ $HOME"},
 {"id": "s-uni", "name": "UNICODE", "environment": "production", "value": "héllo wörld ✓"}
]
EOF
    )
  fi
  jq -nc --arg token "$TOKEN" --arg team "$TEAM_ID" --argjson secrets "$secrets" \
    '{token: $token, teams: [{id: $team, slug: "acme", name: "Acme", plan: "starter"},
      {id: "99999999-8888-7777-6666-555555555555", slug: "other", name: "Other", plan: "starter"}],
      secrets: $secrets}' |
    stub_curl -X POST --data-binary @- "$(stub_url)/_stub/reset" >/dev/null
}

# stub_curl ARGS...: curl for talking to the stub itself (trusting the test CA, never a proxy).
stub_curl() {
  local ca=()
  [ -z "${STUB_CA:-}" ] || ca=(--cacert "$STUB_CA")
  curl -sf --noproxy '*' "${ca[@]}" "$@"
}

# stub_fault JSON: queues faults (a JSON array, see conformance/stub.py).
stub_fault() { printf '%s' "$1" | stub_curl -X POST --data-binary @- "$(stub_url)/_stub/faults" >/dev/null; }

# stub_requests prints the recorded requests as a JSON array.
stub_requests() { stub_curl "$(stub_url)/_stub/requests"; }

# count_requests [PATH_SUFFIX]: how many API requests were recorded (whose path ends with SUFFIX).
count_requests() {
  stub_requests | jq --arg s "${1:-}" '[.[] | select(.path | endswith($s))] | length'
}

# shells_to_test prints the shells to run cross-shell tests in: bash, and zsh when installed.
shells_to_test() {
  echo bash
  if command -v zsh >/dev/null; then echo zsh; fi
}

# need_zsh skips the current test when zsh is not installed.
need_zsh() {
  command -v zsh >/dev/null || skip "zsh is not installed"
}

# sdk_env sets the configuration variables for the stub and a per-test cache directory, and keeps
# proxies and an older version's cache directory out of the way.
sdk_env() {
  unset CVSM_ENVIRONMENT CVSM_CACHE_TTL CVSM_TIMEOUT CVSM_MAX_RETRIES CVSM_CA_FILE CVSM_CURL_CONFIG \
    XDG_RUNTIME_DIR http_proxy HTTP_PROXY https_proxy HTTPS_PROXY all_proxy ALL_PROXY no_proxy NO_PROXY
  export TMPDIR="$BATS_TEST_TMPDIR"
  export CVSM_TOKEN=$TOKEN
  export CVSM_BASE_URL
  CVSM_BASE_URL="$(stub_url)/api/v1"
  export CVSM_TEAM=acme
  export CVSM_CACHE_DIR="$BATS_TEST_TMPDIR/cache"
}

# common_setup resets the stub, configures the SDK for it and sources cvsm.sh (each test's setup).
common_setup() {
  stub_reset ""
  sdk_env
  # shellcheck disable=SC1090,SC1091 # cvsm.sh is linted on its own
  source "$SDK"
}

# The hooks of a test file: one stub per file, reset and the SDK sourced before each test.
setup_file() { stub_start; }
teardown_file() { stub_stop; }
setup() { common_setup; }
