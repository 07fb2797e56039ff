#!/usr/bin/env bash
# Plots `ferry bench oq --json` output with gnuplot, after JUNE BERRY §6.
# Usage: scripts/plot-oq.sh results/oq.json [outdir]
# Writes <outdir>/oq-fig6.png (Mops and modeled NIC counters vs client
# threads, one column per value size), oq-fig7.png / oq-fig8.png (cache p50 /
# p99 vs achieved throughput, one panel per Twitter cluster), oq-fig9.png /
# oq-fig10.png (PmKv p50 / p99 vs throughput, one panel per put ratio),
# oq-fig11.png (PmKv peak throughput and median latency vs value size), and
# prints the paper's targets as the run judged them. A percentile with too
# few samples behind it is null in the JSON and is left out of the plots.
set -euo pipefail
if [[ $# -lt 1 || "$1" == "-h" || "$1" == "--help" ]]; then
  sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'
  exit 0
fi
in=$1
out=${2:-$(dirname "$in")}
[[ -s "$in" ]] || { echo "plot-oq: no data in $in" >&2; exit 1; }
command -v gnuplot >/dev/null || { echo "plot-oq: gnuplot missing (scripts/install-deps.sh)" >&2; exit 1; }
command -v jq >/dev/null || { echo "plot-oq: jq missing (scripts/install-deps.sh)" >&2; exit 1; }
mkdir -p "$out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

color() {
  case $1 in
    oq) echo "#1b9e77" ;;
    oq-durable) echo "#7570b3" ;;
    deferred) echo "#e6ab02" ;;
    *) echo "#d95f02" ;;  # rawrpc
  esac
}
dash() { case $1 in mp-deleg) echo 1 ;; mp) echo 2 ;; deleg) echo 3 ;; *) echo 4 ;; esac; }
machine=$(jq -rn 'first(inputs | .machine)' "$in")

# ---- Fig. 6: throughput and modeled NIC counters vs client threads ----------------
sizes=$(jq -r 'select(.experiment == "threads") | .value_bytes' "$in" | sort -n | uniq)
if [[ -n "$sizes" ]]; then
  ncol=$(wc -w <<<"$sizes")
  panels_mops="" panels_qpc="" panels_wqe=""
  for size in $sizes; do
    p1="" p2="" p3=""
    for sys in oq oq-durable rawrpc; do
      for v in mp-deleg mp deleg plain; do
        f="$tmp/f6-$size-$sys-$v.tsv"
        jq -r --arg s "$sys" --arg v "$v" --argjson b "$size" \
          'select(.experiment == "threads" and .system == $s and .variant == $v and .value_bytes == $b)
           | [.threads, .achieved_mops, .modeled.qpc_misses_per_op, .modeled.recv_wqe_dmas_per_op, .queue_pairs] | @tsv' \
          "$in" | sort -n > "$f"
        [[ -s "$f" ]] || continue
        c=$(color "$sys")
        d=$(dash "$v")
        p1+="'$f' using 1:2 with linespoints lc rgb '$c' dt $d pt 7 title '$sys $v', "
        p2+="'$f' using 1:3 with linespoints lc rgb '$c' dt $d pt 7 title '$sys $v', "
        p3+="'$f' using 1:4 with linespoints lc rgb '$c' dt $d pt 7 title '$sys $v', "
      done
    done
    panels_mops+="set title '${size} B nilext puts: throughput'
set ylabel 'Mops (committed)'
plot ${p1%, }
"
    panels_qpc+="set title '${size} B: modeled QP-context misses'
set ylabel 'misses per request (modeled)'
plot ${p2%, }
"
    panels_wqe+="set title '${size} B: modeled receive-WQE DMAs'
set ylabel 'DMAs per request (modeled)'
plot ${p3%, }
"
  done
  # Row by row: throughput, then the modeled counters, one column per size.
  gnuplot <<GP
set terminal pngcairo size $((700 * ncol)),1300 noenhanced
set output '$out/oq-fig6.png'
set multiplot layout 3,$ncol title "Fig. 6: closed-loop throughput vs client threads (emulated NICs stepped on one core; $machine)"
set grid
set key left top font ',8'
set xlabel 'client threads (sessions)'
set logscale x 2
set yrange [0:*]
$panels_mops
$panels_qpc
$panels_wqe
unset multiplot
GP
fi

# ---- latency vs throughput panels (Figs. 7-10) --------------------------------------
# latency_figure EXPERIMENT FIELD FILE TITLE
latency_figure() {
  local exp=$1 field=$2 file=$3 title=$4
  local label=${field%_us}
  [[ $label == p50 ]] && label=median
  local workloads panels="" n
  workloads=$(jq -r --arg e "$exp" 'select(.experiment == $e) | .workload' "$in" | awk '!seen[$0]++')
  [[ -n "$workloads" ]] || return 0
  n=$(wc -l <<<"$workloads")
  for w in $workloads; do
    local plot=""
    for sys in rawrpc deferred oq oq-durable; do
      f="$tmp/lat-$exp-$field-$w-$sys.tsv"
      jq -r --arg e "$exp" --arg w "$w" --arg s "$sys" --arg k "$field" \
        'select(.experiment == $e and .workload == $w and .system == $s and .loop == "open")
         | [.achieved_mops, (.[$k] // "NaN"), .offered_fraction] | @tsv' "$in" | sort -g > "$f"
      [[ -s "$f" ]] || continue
      c=$(color "$sys")
      plot+="'$f' using 1:2 with linespoints lc rgb '$c' pt 7 title '$sys', "
    done
    [[ -n "$plot" ]] || continue
    local peak
    peak=$(jq -rn --arg e "$exp" --arg w "$w" 'first(inputs | select(.experiment == $e and .workload == $w and .loop == "open") | .peak.mops)' "$in")
    panels+="set title '$w (RawRPC peak $(printf '%.3f' "$peak") Mops)'
plot ${plot%, }
"
  done
  [[ -n "$panels" ]] || return 0
  local cols=$(( n >= 2 ? 2 : 1 )) rows=$(( (n + 1) / 2 ))
  gnuplot <<GP
set terminal pngcairo size $((cols * 700)),$((rows * 480 + 60)) noenhanced
set output '$out/$file'
set multiplot layout $rows,$cols title "$title ($machine)"
set logscale y
set grid
set key left top font ',8'
set xlabel 'achieved throughput (Mops), open-loop Poisson'
set ylabel '$label latency (us, from scheduled arrival)'
$panels
unset multiplot
GP
}
latency_figure latency p50_us oq-fig7.png "Fig. 7: cache (Twitter clusters), median latency vs throughput"
latency_figure latency p99_us oq-fig8.png "Fig. 8: cache (Twitter clusters), p99 latency vs throughput"
latency_figure pmkv p50_us oq-fig9.png "Fig. 9: PmKv, median latency vs throughput (oq-durable = JUNE BERRY-D)"
latency_figure pmkv p99_us oq-fig10.png "Fig. 10: PmKv, p99 latency vs throughput (oq-durable = JUNE BERRY-D)"

# ---- Fig. 11: value sizes -------------------------------------------------------------
plot_peak="" plot_p50=""
for sys in rawrpc deferred oq-durable; do
  f="$tmp/f11-$sys.tsv"
  jq -r --arg s "$sys" 'select(.experiment == "pmkv_value_size" and .system == $s and .loop == "closed")
    | [.value_bytes, .achieved_mops] | @tsv' "$in" | sort -n > "$f"
  g="$tmp/f11-lat-$sys.tsv"
  jq -r --arg s "$sys" 'select(.experiment == "pmkv_value_size" and .system == $s and .loop == "open")
    | [.value_bytes, (.p50_us // "NaN")] | @tsv' "$in" | sort -n > "$g"
  c=$(color "$sys")
  [[ -s "$f" ]] && plot_peak+="'$f' using 1:2 with linespoints lc rgb '$c' pt 7 title '$sys', "
  [[ -s "$g" ]] && plot_p50+="'$g' using 1:2 with linespoints lc rgb '$c' pt 7 title '$sys', "
done
if [[ -n "$plot_peak" || -n "$plot_p50" ]]; then
  put=$(jq -rn 'first(inputs | select(.experiment == "pmkv_value_size") | .set_fraction * 100)' "$in")
  load=$(jq -rn 'first(inputs | select(.experiment == "pmkv_value_size" and .loop == "open") | .offered_fraction * 100)' "$in")
  gnuplot <<GP
set terminal pngcairo size 1400,520 noenhanced
set output '$out/oq-fig11.png'
set multiplot layout 1,2 title "Fig. 11: PmKv vs value size, ${put}% put ($machine)"
set logscale x 2
set grid
set key left top font ',8'
set xlabel 'value size (bytes)'
set title 'peak throughput (closed loop)'
set ylabel 'Mops'
set yrange [0:*]
$( [[ -n "$plot_peak" ]] && echo "plot ${plot_peak%, }" )
set title 'median latency at ${load}% of RawRPC peak'
set ylabel 'p50 latency (us)'
set logscale y
set yrange [*:*]
$( [[ -n "$plot_p50" ]] && echo "plot ${plot_p50%, }" )
unset multiplot
GP
fi

# ---- the paper's targets, as this run judged them -----------------------------------
jq -r 'select(.targets != null) | .targets[] | [.name, (.offered_fraction * 100 | tostring) + "%",
  ((.system_us // "n/a") | tostring), ((.baseline_us // "n/a") | tostring),
  (if .measured_reduction == null then "n/a" else (.measured_reduction * 100 | floor | tostring) + "%" end),
  ((.required_reduction * 100 | tostring) + "%"), (if .met == null then "n/a" elif .met then "met" else "MISSED" end)] | @tsv' \
  "$in" > "$tmp/targets.tsv"
if [[ -s "$tmp/targets.tsv" ]]; then
  echo "Paper targets (this run):"
  printf '%-48s %6s %10s %10s %9s %8s %7s\n' target load 'us' 'base us' reduction needed verdict
  awk -F'\t' '{ printf "%-48s %6s %10.2f %10.2f %9s %8s %7s\n", $1, $2, $3, $4, $5, $6, $7 }' "$tmp/targets.tsv"
fi
echo "plots written to $out"
