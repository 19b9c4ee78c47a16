#!/usr/bin/env bats
# tls.bats - HTTPS with a private CA: CVSM_CA_FILE / --ca-file, trusted instead of any other store.

load helpers

# make_ca NAME: a self-signed CA in $BATS_FILE_TMPDIR/NAME.pem (key NAME.key).
make_ca() {
  openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=cvsm test $1" \
    -keyout "$BATS_FILE_TMPDIR/$1.key" -out "$BATS_FILE_TMPDIR/$1.pem" 2>/dev/null
}

setup_file() {
  if ! command -v openssl >/dev/null; then
    [ "${CI:-}" != true ] || { echo "openssl is missing under CI=true (.ci/run installs it)" >&2; return 1; }
    skip "openssl is not installed"
  fi
  local d=$BATS_FILE_TMPDIR
  make_ca ca
  make_ca other
  openssl req -newkey rsa:2048 -nodes -subj /CN=127.0.0.1 -keyout "$d/server.key" -out "$d/server.csr" 2>/dev/null
  printf 'subjectAltName=IP:127.0.0.1\n' >"$d/ext"
  openssl x509 -req -in "$d/server.csr" -CA "$d/ca.pem" -CAkey "$d/ca.key" -CAcreateserial \
    -days 2 -extfile "$d/ext" -out "$d/server.pem" 2>/dev/null
  stub_start "$d/server.pem" "$d/server.key"
}
setup() {
  export STUB_SCHEME=https STUB_CA="$BATS_FILE_TMPDIR/ca.pem"
  common_setup
  unset SSL_CERT_FILE SSL_CERT_DIR CURL_CA_BUNDLE
  export CVSM_CACHE_TTL=0 CVSM_TEAM=$TEAM_ID
}

@test "the --ca-file option does the same and wins over CVSM_CA_FILE" {
  CVSM_CA_FILE="$BATS_FILE_TMPDIR/other.pem" run cvsm_get_all --json --ca-file "$BATS_FILE_TMPDIR/ca.pem"
  [ "$status" -eq 0 ]
  [ "$(jq -r .API_KEY <<<"$output")" = k-prod ]
}

@test "a CA file replaces every other store: a store that trusts the server is not used beside it" {
  # Make a CA directory and bundle that curl would trust through the environment.
  mkdir "$BATS_TEST_TMPDIR/store"
  cp "$BATS_FILE_TMPDIR/ca.pem" "$BATS_TEST_TMPDIR/store/$(openssl x509 -hash -noout -in "$BATS_FILE_TMPDIR/ca.pem").0"
  SSL_CERT_DIR="$BATS_TEST_TMPDIR/store" CVSM_MAX_RETRIES=0 run cvsm_get API_KEY
  [ "$output" = k-prod ]
  SSL_CERT_DIR="$BATS_TEST_TMPDIR/store" CURL_CA_BUNDLE="$BATS_FILE_TMPDIR/ca.pem" SSL_CERT_FILE="$BATS_FILE_TMPDIR/ca.pem" \
    CVSM_CA_FILE="$BATS_FILE_TMPDIR/other.pem" CVSM_MAX_RETRIES=0 run cvsm_get API_KEY
  [ "$status" -eq 8 ]
}

@test "the CA file goes to curl as cacert, with no CA directory beside it (the system one included)" {
  mkdir "$BATS_TEST_TMPDIR/bin"
  # A curl that records its config (test data only) and then runs the real one with it.
  printf '#!/bin/sh\ntee -a "%s" | exec "%s" "$@"\n' "$BATS_TEST_TMPDIR/config" "$(command -v curl)" >"$BATS_TEST_TMPDIR/bin/curl"
  chmod +x "$BATS_TEST_TMPDIR/bin/curl"
  PATH="$BATS_TEST_TMPDIR/bin:$PATH" CVSM_CA_FILE="$BATS_FILE_TMPDIR/ca.pem" run cvsm_get API_KEY
  [ "$output" = k-prod ]
  grep -x "cacert = \"$BATS_FILE_TMPDIR/ca.pem\"" "$BATS_TEST_TMPDIR/config"
  grep -x 'capath = "/dev/null"' "$BATS_TEST_TMPDIR/config"
}

@test "a CA file that is not a CA bundle is a network error (TLS)" {
  echo "not a certificate" >"$BATS_TEST_TMPDIR/bad.pem"
  CVSM_CA_FILE="$BATS_TEST_TMPDIR/bad.pem" CVSM_MAX_RETRIES=0 run --separate-stderr cvsm_get API_KEY
  [ "$status" -eq 8 ]
  [[ $stderr == "cvsm: network error: TLS error"* ]]
}
