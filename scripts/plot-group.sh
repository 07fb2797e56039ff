#!/usr/bin/env bash
# Plots `ferry bench group --json` output with gnuplot, after HyperLoop §6.1.
# Usage: scripts/plot-group.sh results/group.json [outdir]
# Writes <outdir>/group-fig8.png (gWRITE/gMEMCPY avg, p95, p99 vs size, quiet
# and loaded), group-fig9.png (gWRITE throughput and replica CPU vs size),
# group-fig10.png (gWRITE p99 vs group size), group-table2.png (gCAS), and
# prints Table 2 (gCAS) and the wire bytes per operation as text. A
# percentile with too few samples behind it is null in the JSON and is left
# out of the plots.
set -euo pipefail
if [[ $# -lt 1 || "$1" == "-h" || "$1" == "--help" ]]; then
  sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'
  exit 0
fi
in=$1
out=${2:-$(dirname "$in")}
[[ -s "$in" ]] || { echo "plot-group: no data in $in" >&2; exit 1; }
command -v gnuplot >/dev/null || { echo "plot-group: gnuplot missing (scripts/install-deps.sh)" >&2; exit 1; }
command -v jq >/dev/null || { echo "plot-group: jq missing (scripts/install-deps.sh)" >&2; exit 1; }
mkdir -p "$out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

systems="hyperloop naive-event naive-poll"
color() { case $1 in hyperloop) echo "#1b9e77" ;; naive-event) echo "#d95f02" ;; *) echo "#7570b3" ;; esac; }

# ---- Fig. 8: latency vs size -------------------------------------------------
panels=""
for prim in gwrite gmemcpy; do
  for load in false true; do
    plot=""
    for sys in $systems; do
      f="$tmp/f8-$prim-$load-$sys.tsv"
      jq -r --arg p "$prim" --arg s "$sys" --argjson l "$load" \
        'select(.experiment == "latency" and .primitive == $p and .system == $s and .load == $l) | [.size, .avg_us, (.p95_us // "NaN"), (.p99_us // "NaN")] | @tsv' \
        "$in" | sort -n > "$f"
      [[ -s "$f" ]] || continue
      c=$(color "$sys")
      plot+="'$f' using 1:2 with linespoints lc rgb '$c' dt 1 pt 7 title '$sys avg', "
      plot+="'$f' using 1:3 with linespoints lc rgb '$c' dt 3 pt 6 title '$sys p95', "
      plot+="'$f' using 1:4 with linespoints lc rgb '$c' dt 2 pt 5 title '$sys p99', "
    done
    [[ -n "$plot" ]] || continue
    label=$([[ $load == true ]] && echo "replica CPU loaded" || echo "quiet")
    panels+="set title '$prim, group of 3, $label'
plot ${plot%, }
"
  done
done
if [[ -n "$panels" ]]; then
  gnuplot <<GP
set terminal pngcairo size 1400,1000 noenhanced
set output '$out/group-fig8.png'
set multiplot layout 2,2 title 'Fig. 8: latency of gWRITE and gMEMCPY, HyperLoop vs Naive-RDMA (emulated NICs; same run)'
set logscale xy
set grid
set key left top font ',8'
set xlabel 'message size (bytes)'
set ylabel 'latency (us)'
$panels
unset multiplot
GP
fi

# ---- Fig. 9: throughput and replica CPU vs size ---------------------------------
plot_tp=""
plot_cpu=""
for sys in $systems; do
  for load in false true; do
    f="$tmp/f9-$sys-$load.tsv"
    jq -r --arg s "$sys" --argjson l "$load" \
      'select(.experiment == "throughput" and .system == $s and .load == $l) | [.size, .ops_per_s / 1000, .replica_cpu_cores, .gbps] | @tsv' \
      "$in" | sort -n > "$f"
    [[ -s "$f" ]] || continue
    c=$(color "$sys")
    dt=$([[ $load == true ]] && echo 2 || echo 1)
    label="$sys$([[ $load == true ]] && echo ' (load)' || echo '')"
    plot_tp+="'$f' using 1:2 with linespoints lc rgb '$c' dt $dt title '$label', "
    plot_cpu+="'$f' using 1:3 with linespoints lc rgb '$c' dt $dt title '$label', "
  done
done
if [[ -n "$plot_tp" ]]; then
  gnuplot <<GP
set terminal pngcairo size 1400,520 noenhanced
set output '$out/group-fig9.png'
set multiplot layout 1,2 title 'Fig. 9: gWRITE throughput and replica CPU, group of 3 (emulated NICs share one core)'
set logscale x 2
set grid
set key right top font ',8'
set xlabel 'message size (bytes)'
set ylabel 'throughput (K operations/s)'
plot ${plot_tp%, }
set ylabel 'replica application CPU (cores busy)'
set yrange [0:*]
plot ${plot_cpu%, }
unset multiplot
GP
fi

# ---- Fig. 10: p99 vs group size -------------------------------------------------
plot10=""
for sys in $systems; do
  for load in false true; do
    f="$tmp/f10-$sys-$load.tsv"
    jq -r --arg s "$sys" --argjson l "$load" \
      'select(.experiment == "group_size" and .system == $s and .load == $l) | [.group, (.p99_us // "NaN")] | @tsv' \
      "$in" | sort -n > "$f"
    [[ -s "$f" ]] || continue
    c=$(color "$sys")
    dt=$([[ $load == true ]] && echo 2 || echo 1)
    label="$sys$([[ $load == true ]] && echo ' (load)' || echo '')"
    plot10+="'$f' using 1:2 with linespoints lc rgb '$c' dt $dt title '$label', "
  done
done
if [[ -n "$plot10" ]]; then
  size=$(jq -r 'select(.experiment == "group_size") | .size' "$in" | head -1)
  gnuplot <<GP
set terminal pngcairo size 900,560 noenhanced
set output '$out/group-fig10.png'
set title 'Fig. 10: gWRITE ($size B) p99 latency vs group size'
set logscale y
set grid
set key left top font ',8'
set xlabel 'group size (replicas)'
set ylabel 'p99 latency (us)'
set xtics 1
plot ${plot10%, }
GP
fi

# ---- Table 2: gCAS ----------------------------------------------------------------
jq -r 'select(.experiment == "cas") | [.system + (if .load then "(load)" else "" end), .avg_us, (.p95_us // "NaN"),
  (.p99_us // "NaN"), .samples] | @tsv' "$in" > "$tmp/t2.tsv"
num() { awk -v v="$1" 'BEGIN { if (v == "NaN") printf "%10s", "n/a"; else printf "%10.1f", v }'; }
if [[ -s "$tmp/t2.tsv" ]]; then
  echo "Table 2: gCAS latency (us), group of 3"
  printf '%-24s %10s %10s %10s %10s\n' system average p95 p99 samples
  while IFS=$'\t' read -r name avg p95 p99 n; do
    printf '%-24s %s %s %s %10s\n' "$name" "$(num "$avg")" "$(num "$p95")" "$(num "$p99")" "$n"
  done < "$tmp/t2.tsv"
  gnuplot <<GP
set terminal pngcairo size 1000,520 noenhanced
set output '$out/group-table2.png'
set title 'Table 2: gCAS latency, group of 3'
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set logscale y
set grid ytics
set ylabel 'latency (us)'
set xtics rotate by -20 font ',9'
set key left top
plot '$tmp/t2.tsv' using 2:xtic(1) title 'average', '' using 3 title 'p95', '' using 4 title 'p99'
GP
fi
# ---- wire bytes per operation per replica (NIC counters) ----------------------------
jq -r 'select((.experiment == "latency" or .experiment == "cas") and .load == false and .wire_bytes_per_op != null)
  | [.system, .primitive, .size, .wire_bytes_per_op.payload, .wire_bytes_per_op.metadata, .wire_bytes_per_op.rearm,
     .wire_bytes_per_op.headers, .wire_bytes_per_op.total, .wire_bytes_per_op.loopback_packets] | @tsv' "$in" \
  | sort -t$'\t' -k2,2 -k3,3n -k1,1 > "$tmp/wire.tsv"
if [[ -s "$tmp/wire.tsv" ]]; then
  echo
  echo "Wire bytes per operation per replica, group of 3 (NIC counters; loopback = NIC-internal packets, no wire)"
  printf '%-12s %-8s %6s %9s %9s %7s %8s %8s %9s\n' system primitive size payload metadata re-arm headers total loopback
  awk -F'\t' '{ printf "%-12s %-8s %6d %9.1f %9.1f %7.1f %8.1f %8.1f %9.1f\n", $1, $2, $3, $4, $5, $6, $7, $8, $9 }' \
    "$tmp/wire.tsv"
fi
echo "plots written to $out"
