#!/usr/bin/env bash
# HyperLoop's transactional store (TxnKv) as real processes: four NIC
# daemons (a client host and three replica hosts), three `ferry store
# replica` processes and a `ferry store client`, on loopback, all described
# by one TOML file.
#   1. setup: the client connects both groups (data and locks), formats a
#      fresh store and connects to every replica's read service.
#   2. stopped: the replicas get SIGSTOP and stay stopped while the client
#      puts PUTS keys -- each one lock, append, execute and unlock on every
#      replica by its NIC. Every put must complete.
#   3. reads: the replicas continue; the client reads every key back from
#      every replica's read service (its CPU, its own image, under its read
#      locks) and scans each replica's whole table in pages: every value
#      exact, nothing missing or extra. Each replica's region file holds the
#      last key, and each replica counted the reads it served.
#   4. stop: SIGTERM stops every replica with exit 0.
# Usage: store_chain.sh FERRY [--puts N]
set -uo pipefail
ferry=$1; shift
puts=150
while [[ $# -gt 0 ]]; do
  case $1 in
    --puts) puts=$2; shift ;;
    *) echo "unknown argument $1"; exit 2 ;;
  esac
  shift
done
source "$(dirname "$0")/lib.sh"
cli_dir ferry-store

# Below the kernel's ephemeral range (ip_local_port_range, 32768-60999 by
# default): a member's outgoing CM connection must not be able to take a port
# another member is about to listen on.
base=$(( 20000 + $$ % 12000 ))
{
  cat <<TOML
[store]
name = "smoke"
replicas = 3
log_bytes = 65536
slots = 512
key_max = 16
value_max = 64
locks = 16
connect_timeout_ms = 20000

[client]
nicd = "$dir/n0.sock"
listen = "127.0.0.1:$base"
TOML
  for i in 0 1 2; do
    printf '\n[[replica]]\nnicd = "%s"\nlisten = "127.0.0.1:%d"\nregion = "%s"\n' \
      "$dir/n$(( i + 1 )).sock" $(( base + 1 + i )) "$dir/r$i.pm"
  done
} >"$dir/store.toml"

for h in 0 1 2 3; do
  "$ferry" nicd --socket "$dir/n$h.sock" --bind "127.0.0.1:0" --name "host$h" --spin-us 50 >"$dir/nicd$h.log" 2>&1 &
  pids+=($!)
done
for h in 0 1 2 3; do wait_for "$dir/nicd$h.log" "event=ready" 10 || die "daemon $h did not start"; done

declare -a replica_pid
for i in 2 1 0; do  # any order: each waits for its downstream
  "$ferry" store replica --config "$dir/store.toml" --index $i >"$dir/replica$i.log" 2>&1 &
  replica_pid[$i]=$!
  pids+=($!)
done

# ---- 1. setup ----
"$ferry" store client --config "$dir/store.toml" --puts "$puts" --value-bytes 48 --verify --scan-page 40 \
  --pause-for-sigusr1 --op-timeout-ms 20000 --json >"$dir/client.log" 2>&1 &
client=$!
pids+=($client)
wait_for "$dir/client.log" "before the puts" 40 || die "the client did not set the store up"
for i in 0 1 2; do wait_for "$dir/replica$i.log" "event=serving" 10 || die "replica $i not serving"; done

# ---- 2. the puts with every replica process stopped ----
for i in 0 1 2; do kill -STOP "${replica_pid[$i]}"; done
for i in 0 1 2; do
  # SIGSTOP is delivered asynchronously: give the group stop a moment.
  for _ in $(seq 100); do [[ $(process_state "${replica_pid[$i]}") == T ]] && break; sleep 0.02; done
  [[ $(process_state "${replica_pid[$i]}") == T ]] || die "replica $i is not stopped"
done
echo "replicas ${replica_pid[*]} stopped; $puts puts"
kill -USR1 $client
wait_for "$dir/client.log" "before the verification" 60 || die "the puts did not complete with the replicas stopped"
for i in 0 1 2; do
  [[ $(process_state "${replica_pid[$i]}") == T ]] || die "replica $i woke up during the puts"
done
grep "event=written" "$dir/client.log"
grep -q "event=written puts=$puts " "$dir/client.log" || die "not every put was written"

# ---- 3. reads from every replica ----
for i in 0 1 2; do kill -CONT "${replica_pid[$i]}"; done
kill -USR1 $client
wait $client
status=$?
[[ $status == 0 ]] || die "client exit status $status"
summary=$(grep '^{' "$dir/client.log")
echo "$summary"
jq -e --argjson puts "$puts" '.ok == true and .mismatches == 0 and .puts == $puts and .put.samples == $puts and
  .read.samples == 3 * $puts and .scan_requests >= 3' <<<"$summary" >/dev/null || die "client summary: $summary"
last=$(printf 'key%06d' $(( puts - 1 )))
for i in 0 1 2; do
  grep -qa "$last" "$dir/r$i.pm" || die "replica $i's region file lacks $last"
done

# ---- 4. stop ----
for i in 0 1 2; do kill -TERM "${replica_pid[$i]}"; done
for i in 0 1 2; do
  wait "${replica_pid[$i]}"; s=$?
  [[ $s == 0 ]] || die "replica $i exit status $s after SIGTERM"
  line=$(grep "event=stop" "$dir/replica$i.log") || die "replica $i: no clean stop"
  reads=$(sed -n 's/.* reads=\([0-9]*\).*/\1/p' <<<"$line")
  (( reads >= puts )) || die "replica $i served $reads reads, fewer than the $puts GETs sent to it"
  echo "replica $i: $line"
done

# ---- 5. replicas restarted over their region files: a new client does not
# wipe the store by mistake ----
for i in 2 1 0; do
  "$ferry" store replica --config "$dir/store.toml" --index $i >"$dir/again$i.log" 2>&1 &
  replica_pid[$i]=$!
  pids+=($!)
done
"$ferry" store client --config "$dir/store.toml" --puts 1 --op-timeout-ms 20000 >"$dir/client2.log" 2>&1
s=$?
[[ $s == 2 ]] || die "a client without --format over an existing store exited $s"
grep -q "already holds a store" "$dir/client2.log" || die "no clear refusal from the second client"
for i in 0 1 2; do
  grep -qa "$last" "$dir/r$i.pm" || die "replica $i's region file lost $last after the refused client"
  kill -TERM "${replica_pid[$i]}"
done
for i in 0 1 2; do wait "${replica_pid[$i]}" || true; done
echo "PASS"
