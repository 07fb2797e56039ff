#!/usr/bin/env bash
# Plots `ferry bench store --json` output with gnuplot, after HyperLoop §6.2:
#   store-fig12.png  the transactional store's write latency (p50, p99,
#                    p99.9) per YCSB workload for HyperLoop, the Naive
#                    baselines and Redis (SET + WAIT 2 0), quiet and loaded
#   store-fig11.png  replicated RocksDB's YCSB-A update latency (p50, p95,
#                    p99, p99.9) for HyperLoop and the Naive baselines,
#                    closed loop and ("open") at Poisson arrivals
# Usage: scripts/plot-store.sh results/store.json [outdir]
# Prints the summary (p99 ratios under load). A percentile with too few
# samples behind it is null in the JSON and is drawn as missing.
set -euo pipefail
if [[ $# -lt 1 || "$1" == "-h" || "$1" == "--help" ]]; then
  sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'
  exit 0
fi
in=$1
out=${2:-$(dirname "$in")}
[[ -s "$in" ]] || { echo "plot-store: no data in $in" >&2; exit 1; }
command -v gnuplot >/dev/null || { echo "plot-store: gnuplot missing (scripts/install-deps.sh)" >&2; exit 1; }
command -v jq >/dev/null || { echo "plot-store: jq missing (scripts/install-deps.sh)" >&2; exit 1; }
mkdir -p "$out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# One row per (workload, system, load) write op: label, p50, p99, p99.9
# (the points whose reads ran on the client thread: Fig. 12's writes).
jq -r 'select(.experiment == "ycsb" and .op != "read" and .op != "scan" and (.reads_at // "client") == "client") |
       ["\(.workload)-\(.op) \(.system) \(.load)", (.p50_us // "NaN"), (.p99_us // "NaN"), (.p999_us // "NaN")] | @tsv' \
  "$in" > "$tmp/writes.tsv"
[[ -s "$tmp/writes.tsv" ]] || { echo "plot-store: no write points in $in" >&2; exit 1; }
# Only the percentiles some point has enough samples for (a column of NaN
# would stop gnuplot).
series="'$tmp/writes.tsv' using 2:xtic(1) title 'p50'"
col=3
for name in p99 p99.9; do
  if awk -F'\t' -v c=$col '$c != "NaN" { found = 1 } END { exit !found }' "$tmp/writes.tsv"; then
    series+=", '' using $col title '$name'"
  fi
  col=$(( col + 1 ))
done
gnuplot <<GP
set terminal pngcairo size 1600,600
set output '$out/store-fig12.png'
set title 'Transactional store: write latency per YCSB workload (HyperLoop vs Naive-RDMA vs Redis WAIT 2), quiet and with the replica CPU loaded'
set datafile separator "\t"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set logscale y
set ylabel 'latency (us, log)'
set xtics rotate by -60 font ',8'
set key top left
plot $series
GP
echo "wrote $out/store-fig12.png"

# Figure 11: one row per (system, load, arrivals) of RocksDB's YCSB-A updates.
jq -r 'select(.experiment == "rocksdb" and .op == "update") |
       ["\(.system) \(.load)\(if .arrivals == "poisson" then " open" else "" end)", (.p50_us // "NaN"), (.p95_us // "NaN"), (.p99_us // "NaN"), (.p999_us // "NaN")] | @tsv' \
  "$in" > "$tmp/rocksdb.tsv"
if [[ -s "$tmp/rocksdb.tsv" ]]; then
  series="'$tmp/rocksdb.tsv' using 2:xtic(1) title 'p50'"
  col=3
  for name in p95 p99 p99.9; do
    if awk -F'\t' -v c=$col '$c != "NaN" { found = 1 } END { exit !found }' "$tmp/rocksdb.tsv"; then
      series+=", '' using $col title '$name'"
    fi
    col=$(( col + 1 ))
  done
  gnuplot <<GP
set terminal pngcairo size 1150,650
set output '$out/store-fig11.png'
set rmargin 10
set bmargin 7
set title 'Replicated RocksDB: YCSB-A update latency (WAL replicated at every Sync), quiet and with the replica CPU loaded'
set datafile separator "\t"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set logscale y
set ylabel 'latency (us, log)'
set xtics rotate by -30
set key top left
plot $series
GP
  echo "wrote $out/store-fig11.png"
else
  echo "plot-store: no rocksdb points in $in (--experiments rocksdb); no Figure 11" >&2
fi
jq -c 'select(.experiment == "summary")' "$in"
