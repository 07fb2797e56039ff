#!/usr/bin/env bash
# `ferry sim` as a user runs it: every system runs a few seeds clean; a seed
# replayed in a new process is the same run (the digest is equal, so nothing
# depends on addresses, timing or the process); the summary names the
# faults that struck.
#   sim.sh FERRY
set -euo pipefail
ferry=$1
for system in $("$ferry" sim --help | awk '/^Subcommands:/{on=1; next} on && NF {print $1}'); do
  out=$("$ferry" sim "$system" --seeds 20 --quiet)
  printf '%s\n' "$out" | tail -1
  grep -q '^clean: 0 failed' <<<"$out" || { echo "$system: a seed failed" >&2; exit 1; }
  a=$("$ferry" sim "$system" --seed 11 | grep '^ok seed=11')
  b=$("$ferry" sim "$system" --seed 11 | grep '^ok seed=11')
  [[ -n "$a" && "$a" == "$b" ]] || { echo "$system: seed 11 differs between processes: '$a' vs '$b'" >&2; exit 1; }
  echo "$system: $a"
done
