# The plumbing the multi-process CLI tests share; sourced, never run.
#   cli_dir NAME     a fresh directory (on /dev/shm when it can) in $dir, an
#                    empty $pids, and the traps: on exit every process in
#                    $pids is continued and killed, cleanup_extra (if the
#                    script defines one) runs first, and $dir is removed; a
#                    run killed by SIGTERM/SIGINT still cleans up.
#   die MSG          FAIL with every log of $dir (the last 40 lines each)
#   wait_for FILE PATTERN SECONDS   until a line of FILE matches (status 1 if not)
#   wait_exit PID SECONDS           until PID exits (die if not), reaping it: its status in $?
#   process_state PID               its /proc state letter (R, S, T, ...)

cli_dir() {
  dir=$(mktemp -d "/dev/shm/$1-XXXXXX" 2>/dev/null || mktemp -d)
  pids=()
  trap cli_cleanup EXIT
  trap 'exit 143' TERM INT
}

cli_cleanup() {
  if declare -F cleanup_extra >/dev/null; then cleanup_extra; fi
  for p in "${pids[@]}"; do kill -CONT "$p" 2>/dev/null; kill -KILL "$p" 2>/dev/null; done
  wait 2>/dev/null
  rm -rf "$dir"
}

die() {
  echo "FAIL: $*"
  for f in "$dir"/*.log; do echo "--- $f"; tail -40 "$f"; done
  exit 1
}

wait_for() {
  for _ in $(seq $(( $3 * 20 ))); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.05; done
  return 1
}

wait_exit() {
  for _ in $(seq $(( $2 * 20 ))); do kill -0 "$1" 2>/dev/null || break; sleep 0.05; done
  kill -0 "$1" 2>/dev/null && die "process $1 did not exit within $2 s"
  wait "$1"
}

process_state() { awk '{print $3}' "/proc/$1/stat" 2>/dev/null; }
