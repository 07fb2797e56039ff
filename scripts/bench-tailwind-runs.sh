#!/usr/bin/env bash
# Runs `ferry bench tailwind` RUNS times (default 3) from this tree, each run
# in fresh processes: every experiment with DRAM (battery-backed) backup
# buffers, then the latency experiment with persistent-memory buffers
# (Tailwind's WRITE + FLUSH, the RPC backups persisting their copy). Prints
# the min / median / max of each figure across the runs: the issue's targets
# (throughput >= 1.7x, PUT p50 >= 2x and p99 >= 3x lower at 80 % of the RPC
# peak, backup CPU per PUT 0), the RPC baseline's merging, Fig. 9's
# per-primary ratios, and Fig. 13's recovery with its phases.
# Usage: scripts/bench-tailwind-runs.sh OUTDIR [RUNS] [-- extra bench tailwind options]
#   OUTDIR/run<i>-<media>.json   one JSON object per point (media: dram, pm)
#   OUTDIR/run<i>-<media>.txt    the text report
#   OUTDIR/tailwind-bench.json   every run's points, each with "run" and "media"
#   OUTDIR/figures.txt           the spread of each figure
# Environment: FERRY (default build/ferry). Storage goes under the working
# directory (a real file system): run it from one, not from tmpfs.
set -euo pipefail
# shellcheck source=scripts/bench-runs-lib.sh
. "$(dirname "$0")/bench-runs-lib.sh"
runs_args bench-tailwind-runs 16 "$@"
set -- "${extra[@]}"
for ((i = 1; i <= runs; i++)); do
  echo "bench-tailwind-runs: run $i of $runs, DRAM buffers, every experiment ($(date -u +%H:%M:%S))" >&2
  "$ferry" bench tailwind --json --backup-media dram "$@" >"$out/run$i-dram.json" 2>"$out/run$i-dram.txt"
  echo "bench-tailwind-runs: run $i of $runs, PM buffers, latency ($(date -u +%H:%M:%S))" >&2
  "$ferry" bench tailwind --json --backup-media pm --experiments latency "$@" \
    >"$out/run$i-pm.json" 2>"$out/run$i-pm.txt"
done
merge_runs media >"$out/tailwind-bench.json"
jq -r -s "$JQ_SPREAD"'
  group_by(.run) as $runs
  | def summary(m): [$runs[] | map(select(.media == m and .experiment == "summary"))[0]];
    def at80(m; s): [$runs[] | map(select(.media == m and .experiment == "latency" and .system == s))
      | min_by((.offered_fraction - 0.8) | fabs)];
    def active(w; a): [$runs[] | map(select(.media == "dram" and .experiment == "active" and .workload == w
      and .active_primaries == a)) as $p
      | ($p | map(select(.system == "tailwind"))[0].mops_per_active_primary) as $t
      | ($p | map(select(.system == "rpc"))[0].mops_per_active_primary) as $r
      | select($t != null and $r != null and $r > 0) | $t / $r];
    def rec(s): [$runs[] | map(select(.media == "dram" and .experiment == "recovery" and .system == s))[0]];
  ["figure (min / median / max over \($runs | length) runs)", "value"],
  (["dram", "pm"][] as $m
    | (["\($m): throughput ratio, write-only peak (target >= 1.7)", (summary($m) | map(.throughput_ratio) | spread)],
       ["\($m): PUT p50 ratio at 80 % (target >= 2)", (summary($m) | map(.p50_ratio) | spread)],
       ["\($m): PUT p99 ratio at 80 % (target >= 3)", (summary($m) | map(.p99_ratio) | spread)],
       ["\($m): tailwind backup ns per PUT at 80 %", (at80($m; "tailwind") | map(.backup_cpu_ns_per_put) | spread)],
       ["\($m): rpc backup ns per PUT at 80 %", (at80($m; "rpc") | map(.backup_cpu_ns_per_put) | spread)],
       ["\($m): rpc appends per replicate RPC at 80 %", (at80($m; "rpc") | map(.appends_per_replicate_rpc) | spread)],
       ["\($m): tailwind PUT p50 / p99 at 80 %, us",
        "\(at80($m; "tailwind") | map(.p50_us) | spread)  |  \(at80($m; "tailwind") | map(.p99_us) | spread)"],
       ["\($m): rpc PUT p50 / p99 at 80 %, us",
        "\(at80($m; "rpc") | map(.p50_us) | spread)  |  \(at80($m; "rpc") | map(.p99_us) | spread)"],
       ["\($m): bound_by at 80 %, rpc / tailwind",
        "\(at80($m; "rpc") | map(.bound_by) | join(",")) / \(at80($m; "tailwind") | map(.bound_by) | join(","))"])),
  (["ycsb-b", "ycsb-a", "write-only"][] as $w | [1, 4][] as $a
    | ["Fig. 9 \($w), \($a) active: tailwind / rpc per primary", (active($w; $a) | spread)]),
  (["rpc", "tailwind"][] as $s
    | ["Fig. 13 \($s): recovery s (its phases)",
       "\(rec($s) | map(.recovery_s) | spread)  (read \(rec($s) | map(.read_s) | spread); replay \(rec($s) | map(.replay_s) | spread); restore \(rec($s) | map(.restore_s) | spread))"],
      ["Fig. 13 \($s): Algorithm 1 over open buffers, ms CPU (buffers)",
       "\(rec($s) | map(.algorithm1_scan_ms) | spread)  (\(rec($s) | map(.open_buffers_scanned) | spread))"])
  | @tsv' "$out/tailwind-bench.json" | column -t -s $'\t' | tee "$out/figures.txt"
