#!/usr/bin/env bash
# LogKv as real processes: three NIC daemons (hosts), a `ferry logkv
# coordinator`, four `ferry logkv server`s (two hosts of two servers, the
# coordinator and the clients on the third) and `ferry logkv client`s, all
# described by one TOML file.
#   1. load: a client writes KEYS keys; a second client reads every one back
#      (check: exact values).
#   2. crash: while a second client loads more keys, server 1 gets SIGKILL.
#      Nobody tells the coordinator: it must notice the missed heartbeats and
#      recover the server's tablets on the others from their backups
#      (event=recovered). The load must complete (its PUTs to the dead
#      server's tablets retried until they moved), and both loads' keys must
#      check exact, served by the survivors.
#   3. the control: a check against keys that were never written must fail
#      (exit 1), so the checks above can fail.
#   4. stop: SIGTERM stops every member with exit 0.
# Usage: logkv_cluster.sh FERRY [--replication tailwind|rpc] [--keys N]
set -uo pipefail
ferry=$1; shift
replication=tailwind; keys=3000
while [[ $# -gt 0 ]]; do
  case $1 in
    --replication) replication=$2; shift ;;
    --keys) keys=$2; shift ;;
    *) echo "unknown argument $1"; exit 2 ;;
  esac
  shift
done
source "$(dirname "$0")/lib.sh"
cli_dir ferry-logkv

# Below the kernel's ephemeral range (32768-60999 by default), where the
# members' outgoing connections take their ports.
base=$(( 20000 + $$ % 12000 ))
{
  cat <<TOML
[cluster]
replication = "$replication"
replicas = 2
workers = 1
segment_bytes = 65536
backup_buffers = 24
tables = ["usertable"]
heartbeat_ms = 100
missed_beats = 5
connect_timeout_ms = 30000

[coordinator]
nicd = "$dir/n2.sock"
listen = "127.0.0.1:$base"

[client]
nicd = "$dir/n2.sock"
TOML
  for i in 0 1 2 3; do
    printf '\n[[server]]\nnicd = "%s"\nlisten = "127.0.0.1:%d"\ndir = "%s"\n' \
      "$dir/n$(( i / 2 )).sock" $(( base + 1 + i )) "$dir/s$i"
  done
} >"$dir/logkv.toml"
echo "replication=$replication keys=$keys config:"; cat "$dir/logkv.toml"

for h in 0 1 2; do
  "$ferry" nicd --socket "$dir/n$h.sock" --bind "127.0.0.1:0" --name "host$h" --spin-us 50 >"$dir/nicd$h.log" 2>&1 &
  pids+=($!)
done
for h in 0 1 2; do wait_for "$dir/nicd$h.log" "event=ready" 10 || die "daemon $h did not start"; done

"$ferry" logkv coordinator --config "$dir/logkv.toml" >"$dir/coordinator.log" 2>&1 &
coord=$!; pids+=($coord)
declare -a server_pid
for i in 3 2 1 0; do  # any order: each waits for the others
  "$ferry" logkv server --config "$dir/logkv.toml" --index $i >"$dir/server$i.log" 2>&1 &
  server_pid[$i]=$!; pids+=($!)
done
wait_for "$dir/coordinator.log" "event=ready" 60 || die "the coordinator never saw every server"
echo "cluster up: $(grep -c event=enlisted "$dir/coordinator.log") servers enlisted"

client() { "$ferry" logkv client --config "$dir/logkv.toml" "$@"; }

# ---- 1. load and check ----
client load --keys "$keys" --seed 7 --json >"$dir/load1.log" 2>&1 || die "load 1 failed"
cat "$dir/load1.log" | tail -1
client check --keys "$keys" --seed 7 >"$dir/check1.log" 2>&1 || die "check 1 failed"
grep -q "missing=0 wrong=0" "$dir/check1.log" || die "check 1 summary"
client put hello world >/dev/null 2>"$dir/put.log" || die "put failed"
client get hello 2>&1 | grep -q "value=world" || die "get did not return the value"

# ---- 2. crash server 1 during a load ----
client load --keys "$keys" --first "$keys" --seed 8 >"$dir/load2.log" 2>&1 &
loader=$!; pids+=($loader)
sleep 0.3
kill -KILL "${server_pid[1]}"
wait "${server_pid[1]}" 2>/dev/null
echo "server 1 killed during load 2"
wait_for "$dir/coordinator.log" "event=recovered server=1" 60 || die "no recovery of server 1"
grep "event=server_crashed\|event=recovered" "$dir/coordinator.log"
wait "$loader" || die "load 2 (across the crash) failed"
echo "load 2 across the crash: $(tail -1 "$dir/load2.log")"
client check --keys "$keys" --seed 7 >"$dir/check2.log" 2>&1 || die "check of load 1 after the crash failed"
grep -q "missing=0 wrong=0" "$dir/check2.log" || die "check 2 summary"
client check --keys "$keys" --first "$keys" --seed 8 >"$dir/check3.log" 2>&1 || die "check of load 2 failed"
grep -q "missing=0 wrong=0" "$dir/check3.log" || die "check 3 summary"
client get hello 2>&1 | grep -q "value=world" || die "get after the crash"
echo "after the crash: $(tail -1 "$dir/check2.log")"

# ---- 3. the control: keys never written must be reported missing ----
client check --keys 10 --first $(( keys * 10 )) --seed 7 >"$dir/control.log" 2>&1 && die "check of absent keys passed"
grep -q "missing=10" "$dir/control.log" || die "the control did not count the missing keys"

# ---- 4. stop ----
for i in 0 2 3; do kill -TERM "${server_pid[$i]}"; done
kill -TERM "$coord"
for i in 0 2 3; do
  wait "${server_pid[$i]}"; s=$?
  [[ $s == 0 ]] || die "server $i exit status $s after SIGTERM"
done
wait "$coord"; s=$?
[[ $s == 0 ]] || die "coordinator exit status $s after SIGTERM"
grep -h "event=counters" "$dir"/server*.log
echo "PASS"
