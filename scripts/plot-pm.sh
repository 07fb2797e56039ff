#!/usr/bin/env bash
# Plots `ferry bench pm --json` output with gnuplot, after the ATC'21 study.
# Usage: scripts/plot-pm.sh results/pm.json [outdir]
# Writes <outdir>/pm-one-sided.png and pm-two-sided.png (hint factor analysis,
# cf. the paper's Fig. 8/9: modeled media-bound rate and write amplification
# per variant and size) and pm-persist.png (persistent-write latency ratios).
set -euo pipefail
if [[ $# -lt 1 || "$1" == "-h" || "$1" == "--help" ]]; then
  sed -n '2,7p' "$0" | sed 's/^# \{0,1\}//'
  exit 0
fi
in=$1
out=${2:-$(dirname "$in")}
[[ -s "$in" ]] || { echo "plot-pm: no data in $in" >&2; exit 1; }
command -v gnuplot >/dev/null || { echo "plot-pm: gnuplot missing (scripts/install-deps.sh)" >&2; exit 1; }
command -v jq >/dev/null || { echo "plot-pm: jq missing (scripts/install-deps.sh)" >&2; exit 1; }
mkdir -p "$out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

for exp in one_sided two_sided; do
  plot_rate=""
  plot_amp=""
  i=0
  while IFS= read -r variant; do
    f="$tmp/$exp-$i.tsv"
    jq -r --arg e "$exp" --arg v "$variant" \
      'select(.experiment == $e and .variant == $v and .memory == "pm") | [.size, .modeled.media_bound_mops, .modeled.write_amplification] | @tsv' \
      "$in" | sort -n > "$f"
    if [[ -s "$f" ]]; then
      plot_rate+="'$f' using 1:2 with linespoints title '$variant', "
      plot_amp+="'$f' using 1:3 with linespoints title '$variant', "
    fi
    i=$((i + 1))
  done < <(jq -r --arg e "$exp" 'select(.experiment == $e and .memory == "pm") | .variant' "$in" | awk '!seen[$0]++')
  [[ -n "$plot_rate" ]] || continue
  gnuplot <<GP
set terminal pngcairo size 1200,480 noenhanced
set output '$out/pm-${exp//_/-}.png'
set multiplot layout 1,2 title '$exp remote write to PM: hints on and off (counters and bound are modeled, not measured)'
set logscale x 2
set grid
set key left top
set xlabel 'write size (bytes)'
set ylabel 'modeled media-bound rate (M writes/s, 6 Optane DIMMs)'
plot ${plot_rate%, }
set ylabel 'modeled write amplification (media bytes / 64 B requests)'
set key right top
plot ${plot_amp%, }
unset multiplot
GP
done

jq -r 'select(.experiment == "persist") | [.size, .persist_ratio_h9, .persist_ratio_strawman, (.with_modeled_wire.persist_ratio_h9 // "NaN"), (.with_modeled_wire.persist_ratio_strawman // "NaN"), (.with_modeled_wire.wire_delay_ns // 0)] | @tsv' \
  "$in" | sort -n > "$tmp/persist.tsv"
if [[ -s "$tmp/persist.tsv" ]]; then
  wire=$(head -1 "$tmp/persist.tsv" | cut -f6)
  gnuplot <<GP
set terminal pngcairo size 900,520 noenhanced
set output '$out/pm-persist.png'
set title 'Persistent remote write latency p50, relative to a plain WRITE'
set logscale x 2
set grid
set key left top
set xlabel 'write size (bytes)'
set ylabel 'p50 / plain WRITE p50'
set yrange [0.8:*]
plot '$tmp/persist.tsv' using 1:2 with linespoints lw 2 title 'H9 (emulator)', \
     '' using 1:3 with linespoints lw 2 title 'strawman (emulator)', \
     '' using 1:4 with linespoints dt 2 title 'H9 (+${wire} ns modeled wire)', \
     '' using 1:5 with linespoints dt 2 title 'strawman (+${wire} ns modeled wire)'
GP
fi
echo "plot-pm: wrote PNGs to $out"
