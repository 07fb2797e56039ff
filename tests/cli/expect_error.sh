#!/usr/bin/env bash
# Runs a command that must be refused: it has to exit with the given status
# and say the given words (a grep -E pattern) -- a crash or an unrelated
# failure does not pass.
#   expect_error.sh STATUS PATTERN COMMAND [ARGS...]
set -uo pipefail
want_status=$1 pattern=$2
shift 2
out=$("$@" 2>&1)
status=$?
printf '%s\n' "$out"
if [[ $status != "$want_status" ]]; then
  echo "expected exit status $want_status, got $status" >&2
  exit 1
fi
if ! grep -qE -- "$pattern" <<<"$out"; then
  echo "expected the output to match: $pattern" >&2
  exit 1
fi
