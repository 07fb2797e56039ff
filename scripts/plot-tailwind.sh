#!/usr/bin/env bash
# Plots `ferry bench tailwind --json` output with gnuplot, after Tailwind §5.
# Usage: scripts/plot-tailwind.sh results/tailwind.json [outdir]
# Writes <outdir>/tailwind-fig7.png (closed-loop Mops per server vs clients,
# one panel per workload), tailwind-fig8.png (write-only PUT median and p99
# vs achieved throughput), tailwind-fig9.png (Mops per active primary vs
# active primaries), tailwind-fig10.png (worker and backup-worker cores per
# server vs throughput; there is no dispatch thread), tailwind-fig13.png
# (recovery time per system, grouped by objects), each comparing tailwind
# with the rpc baseline, and prints the run's summary against the targets.
# A percentile with too few samples behind it is null in the JSON and is
# left out of the plots.
set -euo pipefail
if [[ $# -lt 1 || "$1" == "-h" || "$1" == "--help" ]]; then
  sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'
  exit 0
fi
in=$1
out=${2:-$(dirname "$in")}
[[ -s "$in" ]] || { echo "plot-tailwind: no data in $in" >&2; exit 1; }
command -v gnuplot >/dev/null || { echo "plot-tailwind: gnuplot missing (scripts/install-deps.sh)" >&2; exit 1; }
command -v jq >/dev/null || { echo "plot-tailwind: jq missing (scripts/install-deps.sh)" >&2; exit 1; }
jq -e -s 'length > 0' "$in" >/dev/null 2>&1 || { echo "plot-tailwind: $in is not JSON lines from ferry bench tailwind --json" >&2; exit 1; }
mkdir -p "$out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

systems="rpc tailwind"
color() { case $1 in tailwind) echo "#1b9e77" ;; *) echo "#d95f02" ;; esac; }  # rpc
machine=$(jq -rn 'first(inputs | .machine // empty)' "$in")
written=""

# ---- Fig. 7: throughput per server vs clients, one panel per workload --------------
workloads=$(jq -r 'select(.experiment == "clients") | .workload' "$in" | awk '!seen[$0]++')
if [[ -n "$workloads" ]]; then
  n=$(wc -l <<<"$workloads")
  panels=""
  for w in $workloads; do
    plot=""
    for sys in $systems; do
      f="$tmp/f7-$w-$sys.tsv"
      jq -r --arg w "$w" --arg s "$sys" \
        'select(.experiment == "clients" and .workload == $w and .system == $s) | [.clients, .mops_per_server] | @tsv' \
        "$in" | sort -n > "$f"
      [[ -s "$f" ]] || continue
      plot+="'$f' using 1:2 with linespoints lc rgb '$(color "$sys")' pt 7 title '$sys', "
    done
    [[ -n "$plot" ]] || continue
    panels+="set title '$w'
plot ${plot%, }
"
  done
  if [[ -n "$panels" ]]; then
    servers=$(jq -rn 'first(inputs | select(.experiment == "clients") | .active_primaries)' "$in")
    gnuplot <<GP
set terminal pngcairo size $((n * 600)),500 noenhanced
set output '$out/tailwind-fig7.png'
set multiplot layout 1,$n title "Fig. 7: closed-loop throughput per server vs clients ($servers servers; $machine)"
set grid
set key left top font ',9'
set xlabel 'clients (requests in flight)'
set ylabel 'Mops per server'
set logscale x 2
set yrange [0:*]
$panels
unset multiplot
GP
    written+=" tailwind-fig7.png"
  fi
fi

# ---- Figs. 8 and 10: the latency experiment (write-only, open loop) -----------------
have_latency=$(jq -rn '[inputs | select(.experiment == "latency")] | length' "$in")
if [[ $have_latency -gt 0 ]]; then
  p50="" p99="" work="" backup=""
  for sys in $systems; do
    f="$tmp/lat-$sys.tsv"
    jq -r --arg s "$sys" \
      'select(.experiment == "latency" and .system == $s)
       | [.mops, (.p50_us // "NaN"), (.p99_us // "NaN"), .worker_cores, .backup_worker_cores, .offered_fraction] | @tsv' \
      "$in" | sort -g > "$f"
    [[ -s "$f" ]] || continue
    c=$(color "$sys")
    p50+="'$f' using 1:2 with linespoints lc rgb '$c' pt 7 title '$sys', "
    p99+="'$f' using 1:3 with linespoints lc rgb '$c' pt 7 title '$sys', "
    work+="'$f' using 1:4 with linespoints lc rgb '$c' pt 7 title '$sys', "
    backup+="'$f' using 1:5 with linespoints lc rgb '$c' pt 7 title '$sys', "
  done
  peak=$(jq -rn 'first(inputs | select(.experiment == "latency") | .rpc_peak_mops)' "$in")
  loads=$(jq -r 'select(.experiment == "latency") | .offered_fraction * 100 | round | tostring + "%"' "$in" \
    | sort -n | uniq | paste -sd, -)
  xlabel="achieved Mops (Poisson at $loads of the RPC peak, $(printf '%.3f' "$peak") Mops)"
  if [[ -n "$p50" ]]; then
    gnuplot <<GP
set terminal pngcairo size 1300,520 noenhanced
set output '$out/tailwind-fig8.png'
set multiplot layout 1,2 title "Fig. 8: write-only PUT latency vs throughput ($machine)"
set grid
set key left top font ',9'
set xlabel '$xlabel' font ',9'
set logscale y
set title 'median'
set ylabel 'PUT p50 latency (us, from scheduled arrival)'
plot ${p50%, }
set title '99th percentile'
set ylabel 'PUT p99 latency (us, from scheduled arrival)'
plot ${p99%, }
unset multiplot
GP
    gnuplot <<GP
set terminal pngcairo size 1300,520 noenhanced
set output '$out/tailwind-fig10.png'
set multiplot layout 1,2 title "Fig. 10: server CPU vs throughput, write-only (dispatch cores: none -- no dispatch thread, dispatch_cores is null; $machine)"
set grid
set key left top font ',9'
set xlabel '$xlabel' font ',9'
set yrange [0:*]
set title 'client-request workers (busy time)'
set ylabel 'worker cores per server'
plot ${work%, }
set title 'backup worker (busy time)'
set ylabel 'backup worker cores per server'
plot ${backup%, }
unset multiplot
GP
    written+=" tailwind-fig8.png tailwind-fig10.png"
  fi
fi

# ---- Fig. 9: throughput per active primary --------------------------------------------
# One line per system and workload (the paper's panels a-c: YCSB-B, YCSB-A, write-only).
plot=""
for sys in $systems; do
  pt=7
  for w in $(jq -r 'select(.experiment == "active") | .workload' "$in" | sort -u); do
    f="$tmp/f9-$sys-$w.tsv"
    jq -r --arg s "$sys" --arg w "$w" \
      'select(.experiment == "active" and .system == $s and .workload == $w) | [.active_primaries, .mops_per_active_primary] | @tsv' \
      "$in" | sort -n > "$f"
    [[ -s "$f" ]] || continue
    plot+="'$f' using 1:2 with linespoints lc rgb '$(color "$sys")' pt $pt title '$sys $w', "
    pt=$((pt + 2))
  done
done
if [[ -n "$plot" ]]; then
  clients=$(jq -rn 'first(inputs | select(.experiment == "active") | .clients)' "$in")
  gnuplot <<GP
set terminal pngcairo size 750,520 noenhanced
set output '$out/tailwind-fig9.png'
set title "Fig. 9: throughput per active primary ($clients closed-loop clients)\n$machine" font ',10'
set grid
set key right top font ',9'
set xlabel 'active primaries (servers whose tablets receive requests)'
set ylabel 'Mops per active primary'
set xtics 1
set offsets 0.3, 0.3, graph 0.15, 0
set xrange [0.5:*]
set yrange [0:*]
plot ${plot%, }
GP
  written+=" tailwind-fig9.png"
fi

# ---- Fig. 13: recovery time, one group of bars per object count -----------------------
# Clusters in ascending object count; rpc on the left, tailwind on the right.
plot="" i=0
for sys in $systems; do
  f="$tmp/f13-$sys.tsv"
  jq -rs --arg s "$sys" '[.[] | select(.experiment == "recovery")] as $r
    | ($r | map(.objects) | unique) as $sizes
    | $r[] | select(.system == $s) | .objects as $o
    | [($sizes | index($o)), $o, .recovery_s, .objects_per_s] | @tsv' "$in" > "$f"
  [[ -s "$f" ]] || continue
  off=$(awk -v i="$i" 'BEGIN { printf "%.2f", (i - 0.5) * 0.36 }')
  c=$(color "$sys")
  plot+="'$f' using (\$1 + $off):3 with boxes lc rgb '$c' fs solid 0.8 title '$sys', "
  plot+="'$f' using (\$1 + $off):3:(sprintf('%.2f s', \$3)) with labels offset 0,0.8 font ',9' notitle, "
  i=$((i + 1))
done
if [[ -n "$plot" ]]; then
  backups=$(jq -rn 'first(inputs | select(.experiment == "recovery") | .backups // (.servers - 1))' "$in")
  ngroups=$(jq -r 'select(.experiment == "recovery") | .objects' "$in" | sort -u | wc -l)
  xtics=$(jq -rs '[.[] | select(.experiment == "recovery") | .objects] | unique | to_entries
    | map(.value as $o | (if $o >= 1000000 then "\($o / 1000000) M" elif $o >= 1000 then "\($o / 1000) k" else "\($o)" end)
          as $l | "\"\($l) objects\" \(.key)") | join(", ")' "$in")
  gnuplot <<GP
set terminal pngcairo size $((500 + 250 * ngroups)),520 noenhanced
set output '$out/tailwind-fig13.png'
set title "Fig. 13: recovery of one crashed server's tablets ($backups backups)\nthe recovery masters replay and restore in parallel\n$machine" font ',10'
set xtics ($xtics)
set grid ytics
set key left top font ',9'
set ylabel 'recovery time (s)'
set boxwidth 0.34
set xrange [-0.6:$ngroups - 0.4]
set yrange [0:*]
set offsets 0, 0, graph 0.12, 0
plot ${plot%, }
GP
  written+=" tailwind-fig13.png"
fi

# ---- the summary: the run's ratios against the targets --------------------------------
jq -r 'select(.experiment == "summary")
  | def n(f): if . == null then "n/a" else (. * 100 | round / 100 | tostring) end;
    "Summary (write-only; latency at \(.load_point * 100 | round)% of the RPC peak):",
    "  throughput_ratio (tailwind/rpc peak):    \(.throughput_ratio | n(.)) (target >= \(.targets.throughput_ratio_at_least))",
    "  p50_ratio (rpc/tailwind PUT median):     \(.p50_ratio | n(.)) (target >= \(.targets.p50_ratio_at_least))",
    "  p99_ratio (rpc/tailwind PUT p99):        \(.p99_ratio | n(.)) (target >= \(.targets.p99_ratio_at_least))",
    "  backup_cpu_ns_per_put:                   tailwind \(.backup_cpu_ns_per_put.tailwind | n(.)), rpc \(.backup_cpu_ns_per_put.rpc | n(.))",
    "  tailwind backup replication requests:    \(.tailwind_backup_replication_requests)",
    "  meets_targets:                           \(.meets_targets)"' "$in"
[[ -n "$written" ]] || { echo "plot-tailwind: no tailwind points in $in" >&2; exit 1; }
echo "plots written to $out:$written"
