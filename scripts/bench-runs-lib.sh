# Sourced by scripts/bench-*-runs.sh: what every "run a benchmark RUNS
# times and print each figure's spread" script shares.
#
# runs_args NAME HELP_LAST_LINE "$@": prints the calling script's header
# (lines 2..HELP_LAST_LINE) for -h/--help and exits; otherwise sets `out`
# (OUTDIR), `runs` (default 3), `extra` (the options after `--`) and
# `ferry` ($FERRY, default build/ferry), checks that ferry is built and jq
# installed, and creates OUTDIR.
runs_args() {
  local name=$1 help_last=$2
  shift 2
  if [[ $# -lt 1 || "$1" == "-h" || "$1" == "--help" ]]; then
    sed -n "2,${help_last}p" "$0" | sed 's/^# \{0,1\}//'
    exit 0
  fi
  out=$1
  shift
  runs=3
  if [[ $# -gt 0 && "$1" != "--" ]]; then runs=$1; shift; fi
  [[ $# -gt 0 && "$1" == "--" ]] && shift
  extra=("$@")
  ferry=${FERRY:-build/ferry}
  [[ -x "$ferry" ]] || { echo "$name: $ferry is not built (make build)" >&2; exit 1; }
  command -v jq >/dev/null || { echo "$name: jq missing (scripts/install-deps.sh)" >&2; exit 1; }
  mkdir -p "$out"
}

# merge_runs KEY: prints every $out/run<i>-<tag>.json's objects, each with
# "run": i and KEY: "<tag>" (the form, the media: what the run varied).
merge_runs() {
  local key=$1 f b run
  for f in "$out"/run*-*.json; do
    b=$(basename "$f" .json)
    run=${b#run}
    run=${run%%-*}
    jq -c --argjson run "$run" --arg tag "${b#*-}" --arg key "$key" '. + {run: $run, ($key): $tag}' "$f"
  done
}

# A jq definition: an array of numbers as "min / median / max" (two
# decimals), "n/a" when empty. Prepend it to a jq program.
# shellcheck disable=SC2034
JQ_SPREAD='def spread: sort | if length == 0 then "n/a" else
  "\(.[0] * 100 | round / 100) / \(.[(length - 1) / 2 | floor] * 100 | round / 100) / \(.[-1] * 100 | round / 100)" end;'
