#!/usr/bin/env bash
# run.sh - runs the shell SDK's bats suite and ends with one "shell: N passed, N failed, N skipped"
# line. Needs bats, python3 (the stub API), curl and jq; zsh is optional (its tests are skipped).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")" || exit 1
for tool in bats python3 curl jq; do
  if ! command -v "$tool" >/dev/null; then
    echo "run.sh: $tool is not installed (Debian: apt-get install bats curl jq python3)" >&2
    exit 1
  fi
done
log=$(mktemp)
trap 'rm -f "$log"' EXIT
bats --formatter tap . | tee "$log"
rc=${PIPESTATUS[0]}
failed=$(grep -c '^not ok ' "$log")
skipped=$(grep -c '^ok .* # skip' "$log")
passed=$(($(grep -c '^ok ' "$log") - skipped))
echo "shell: $passed passed, $failed failed, $skipped skipped"
if [ "$rc" -eq 0 ] && [ "$passed" -eq 0 ]; then
  echo "run.sh: no test ran" >&2
  exit 1
fi
exit "$rc"
