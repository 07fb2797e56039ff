#!/usr/bin/env bash
# Plots `ferry bench nic --json` output with gnuplot.
# Usage: scripts/plot-nic.sh results/nic.json [outdir]
# Writes <outdir>/nic-latency.png (p50/p99 round trip vs size at 1 outstanding,
# with the same-run ping-pong) and <outdir>/nic-bandwidth.png (Gbit/s vs size
# at the largest outstanding, with same-run memcpy).
set -euo pipefail
if [[ $# -lt 1 || "$1" == "-h" || "$1" == "--help" ]]; then
  sed -n '2,6p' "$0" | sed 's/^# \{0,1\}//'
  exit 0
fi
in=$1
out=${2:-$(dirname "$in")}
[[ -s "$in" ]] || { echo "plot-nic: no data in $in" >&2; exit 1; }
command -v gnuplot >/dev/null || { echo "plot-nic: gnuplot missing (scripts/install-deps.sh)" >&2; exit 1; }
command -v jq >/dev/null || { echo "plot-nic: jq missing (scripts/install-deps.sh)" >&2; exit 1; }
mkdir -p "$out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

ops=$(jq -r '.op' "$in" | sort -u)
maxw=$(jq -s 'map(.outstanding) | max' "$in")
lat_plot=""
bw_plot=""
for op in $ops; do
  jq -r --arg op "$op" 'select(.op == $op and .outstanding == 1) | [.size, .p50_ns, .p99_ns, .reference.p50_ns] | @tsv' \
    "$in" | sort -n > "$tmp/lat-$op.tsv"
  jq -r --arg op "$op" --argjson w "$maxw" 'select(.op == $op and .outstanding == $w) | [.size, .gbps, .reference.gbps] | @tsv' \
    "$in" | sort -n > "$tmp/bw-$op.tsv"
  [[ -s "$tmp/lat-$op.tsv" ]] && lat_plot+="'$tmp/lat-$op.tsv' using 1:2 with linespoints pt 7 title '$op p50', '$tmp/lat-$op.tsv' using 1:3 with lines dt 2 title '$op p99', "
  [[ -s "$tmp/bw-$op.tsv" ]] && bw_plot+="'$tmp/bw-$op.tsv' using 1:2 with linespoints title '$op', "
done
# The references come from the op measured at the most sizes (atomics have one).
first=$(for op in $ops; do echo "$(wc -l < "$tmp/lat-$op.tsv") $op"; done | sort -rn | head -1 | cut -d' ' -f2)
lat_plot+="'$tmp/lat-$first.tsv' using 1:4 with lines lw 2 lc rgb 'black' title 'ping-pong RTT (same run)'"
bw_plot+="'$tmp/bw-$first.tsv' using 1:3 with lines lw 2 lc rgb 'black' title 'memcpy (same run)'"

gnuplot <<GP
set terminal pngcairo size 1000,560 noenhanced
set logscale x 2
set grid
set key outside right top
set xlabel 'message size (bytes)'
set output '$out/nic-latency.png'
set title 'Software RNIC round trip, 1 outstanding (post to completion)'
set ylabel 'latency (ns)'
set logscale y
plot $lat_plot
unset logscale y
set output '$out/nic-bandwidth.png'
set title 'Software RNIC throughput, $maxw outstanding'
set ylabel 'Gbit/s'
plot $bw_plot
GP
echo "plot-nic: wrote $out/nic-latency.png and $out/nic-bandwidth.png"
