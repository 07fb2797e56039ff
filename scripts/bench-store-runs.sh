#!/usr/bin/env bash
# Runs `ferry bench store`'s YCSB-A points RUNS times (default 3) from this
# tree, each run in fresh processes, with the store's interleaved flush (all
# chain systems, reads at the client and at the tail's CPU) and then with a
# separate gFLUSH after each operation (HyperLoop only), and prints the
# min / median / max of each figure across the runs: the issue's target
# (HyperLoop's quiet update p50 at or below Naive-poll's), the traversals
# per write of both forms and what the interleaved flush saves, and the
# reads at the replica's CPU, quiet and under load.
# Usage: scripts/bench-store-runs.sh OUTDIR [RUNS] [-- extra bench store options]
#   OUTDIR/run<i>-<form>.json   one JSON object per point (form: interleaved, separate)
#   OUTDIR/run<i>-<form>.txt    the text report
#   OUTDIR/store-bench.json     every run's points, each with "run" and "form"
#   OUTDIR/figures.txt          the spread of each figure
# Environment: FERRY (default build/ferry), RECORDS (default 20000: the
# Naive baselines load about 1,000 records/s on 2 CPUs), OPS (default 5000).
set -euo pipefail
# shellcheck source=scripts/bench-runs-lib.sh
. "$(dirname "$0")/bench-runs-lib.sh"
runs_args bench-store-runs 16 "$@"
set -- "${extra[@]}"
records=${RECORDS:-20000}
ops=${OPS:-5000}
common=(bench store --experiments ycsb --workloads A --records "$records" --ops "$ops" --json)
for ((i = 1; i <= runs; i++)); do
  echo "bench-store-runs: run $i of $runs, interleaved ($(date -u +%H:%M:%S))" >&2
  "$ferry" "${common[@]}" --systems hyperloop,naive-event,naive-poll --txn-flush interleaved "$@" \
    >"$out/run$i-interleaved.json" 2>"$out/run$i-interleaved.txt"
  echo "bench-store-runs: run $i of $runs, separate ($(date -u +%H:%M:%S))" >&2
  "$ferry" "${common[@]}" --systems hyperloop --reads-at client --txn-flush separate "$@" \
    >"$out/run$i-separate.json" 2>"$out/run$i-separate.txt"
done
merge_runs form >"$out/store-bench.json"
jq -r -s "$JQ_SPREAD"'
  def pick(form; sys; reads; load; op): map(select(.form == form and .system == sys and .load == load and .op == op
    and (.reads_at // "client") == reads));
  group_by(.run) as $runs
  | [$runs[] | pick("interleaved"; "hyperloop"; "client"; "quiet"; "update")[0].p50_us] as $hl
  | [$runs[] | pick("interleaved"; "naive-poll"; "client"; "quiet"; "update")[0].p50_us] as $np
  | [$runs[] | (pick("interleaved"; "hyperloop"; "client"; "quiet"; "update")[0].p50_us)
      / (pick("interleaved"; "naive-poll"; "client"; "quiet"; "update")[0].p50_us)] as $ratio
  | [$runs[] | pick("separate"; "hyperloop"; "client"; "quiet"; "update")[0].p50_us] as $sep
  | [$runs[] | pick("interleaved"; "hyperloop"; "client"; "quiet"; "update")[0].traversals_per_write] as $ti
  | [$runs[] | pick("separate"; "hyperloop"; "client"; "quiet"; "update")[0].traversals_per_write] as $ts
  | [$runs[] | (pick("separate"; "hyperloop"; "client"; "quiet"; "update")[0].p50_us)
      / (pick("interleaved"; "hyperloop"; "client"; "quiet"; "update")[0].p50_us)] as $saved
  | ["figure (min / median / max over \($runs | length) runs)", "value"],
    ["HyperLoop quiet update p50, us (interleaved flush)", ($hl | spread)],
    ["Naive-poll quiet update p50, us", ($np | spread)],
    ["HyperLoop / Naive-poll quiet update p50 (target: <= 1)", ($ratio | spread)],
    ["HyperLoop quiet update p50 with separate gFLUSHes, us", ($sep | spread)],
    ["separate / interleaved update p50", ($saved | spread)],
    ["traversals per update, interleaved", ($ti | spread)],
    ["traversals per update, separate", ($ts | spread)],
    (["quiet", "load"][] as $l | ["hyperloop", "naive-event", "naive-poll"][] as $s | ["client", "replica"][] as $r
      | ["\($s) read p50, us, \($l), reads at \($r)",
         ([$runs[] | pick("interleaved"; $s; $r; $l; "read")[0].p50_us | select(. != null)] | spread)])
  | @tsv' "$out/store-bench.json" | column -t -s $'\t' | tee "$out/figures.txt"
