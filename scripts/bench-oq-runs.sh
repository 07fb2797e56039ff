#!/usr/bin/env bash
# Runs `ferry bench oq` RUNS times (default 3) from this tree, each experiment
# of each run in a fresh process (so that no point inherits an earlier
# point's state), and prints the min / median / max of every paper target's
# measured reduction across the runs, with the regime it was judged in.
# Usage: scripts/bench-oq-runs.sh OUTDIR [RUNS] [-- extra bench oq options]
#   OUTDIR/run<i>-<experiment>.json  one JSON object per point
#   OUTDIR/run<i>-<experiment>.txt   the text report
#   OUTDIR/oq-bench.json             every run's points, each with "run"
#   OUTDIR/targets.txt               the spread of each target
# Environment: FERRY (default build/ferry), EXPERIMENTS (default
# "threads latency pmkv"; threads runs once, in run 1 only).
set -euo pipefail
# shellcheck source=scripts/bench-runs-lib.sh
. "$(dirname "$0")/bench-runs-lib.sh"
runs_args bench-oq-runs 12 "$@"
set -- "${extra[@]}"
experiments=${EXPERIMENTS:-threads latency pmkv}
for ((i = 1; i <= runs; i++)); do
  for e in $experiments; do
    [[ "$e" == threads && $i -gt 1 ]] && continue
    echo "bench-oq-runs: run $i of $runs, $e ($(date -u +%H:%M:%S))" >&2
    "$ferry" bench oq --experiments "$e" --json "$@" >"$out/run$i-$e.json" 2>"$out/run$i-$e.txt"
  done
done
for f in "$out"/run*-*.json; do
  run=$(basename "$f" | sed 's/^run\([0-9]*\)-.*/\1/')
  jq -c --argjson run "$run" '. + {run: $run}' "$f"
done >"$out/oq-bench.json"
# Each target's reduction across runs: min / median / max, judged or not.
jq -r -s '
  [.[] | select(.targets != null) | .targets[] as $t | {name: $t.name, red: $t.measured_reduction,
    need: $t.required_reduction, judged: $t.judged, bound: $t.regime.rawrpc_peak_bound_by,
    srv: $t.regime.rawrpc_peak_server_busy, cli: $t.regime.rawrpc_peak_client_nic_busy}]
  | group_by(.name)[]
  | (map(.red | select(. != null)) | sort) as $r
  | "\(.[0].name): \($r | length) runs, reduction min \($r[0] * 1000 | round / 10)% median \($r[($r | length) / 2 | floor] * 1000 | round / 10)% max \($r[-1] * 1000 | round / 10)% (needs \(.[0].need * 100)%); median \(if $r[($r | length) / 2 | floor] >= .[0].need then "meets" else "misses" end) it; RawRPC peak bound by \(map(.bound) | unique | join("/")), server busy \(map(.srv * 100 | round) | join("/"))%, client/NIC \(map(.cli * 100 | round) | join("/"))%; judged in \(map(select(.judged)) | length) of \(length) runs"
' "$out/oq-bench.json" | tee "$out/targets.txt"
