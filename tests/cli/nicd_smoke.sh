#!/usr/bin/env bash
# `ferry nicd` as a user runs it: it starts and says where it listens, a
# second daemon on the same socket is refused with a clear error, and
# SIGTERM stops the first cleanly (exit 0, socket file removed).
#   nicd_smoke.sh FERRY
set -uo pipefail
ferry=$1
sock=/tmp/ferry-cli-nicd-$$.sock
log=$(mktemp)
"$ferry" nicd --bind 127.0.0.1:0 --socket "$sock" --spin-us 10 >"$log" 2>&1 &
pid=$!
for _ in $(seq 100); do
  grep -q "event=ready" "$log" && break
  sleep 0.05
done
cat "$log"
grep -q "event=ready .*socket=$sock udp=127.0.0.1:" "$log" || { echo "daemon did not report ready"; kill $pid; exit 1; }
out=$("$ferry" nicd --bind 127.0.0.1:0 --socket "$sock" 2>&1)
status=$?
echo "$out"
[[ $status == 1 ]] || { echo "second daemon: expected exit 1, got $status"; kill $pid; exit 1; }
grep -q "already serves $sock" <<<"$out" || { echo "second daemon: unclear error"; kill $pid; exit 1; }
kill -TERM $pid
wait $pid
status=$?
cat "$log"
[[ $status == 0 ]] || { echo "daemon exit status $status after SIGTERM"; exit 1; }
grep -q "event=stop signal=SIGTERM" "$log" || { echo "no stop event"; exit 1; }
[[ ! -e $sock ]] || { echo "socket file left behind"; exit 1; }
rm -f "$log"
