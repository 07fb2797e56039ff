#!/usr/bin/env bash
# A HyperLoop chain as real processes: four NIC daemons (a client host and
# three replica hosts), three `ferry hyperloop replica` processes and a
# `ferry hyperloop client`, on loopback or (--netns) in four network
# namespaces joined by veth pairs on a bridge, a daemon in each.
#   1. stopped: the replicas get SIGSTOP once connected and stay stopped for
#      the whole run while the client runs OPS operations (gWRITEs and gCAS
#      counter increments). Every one must complete and be applied once and
#      in order (the counter), and each replica's region file must hold
#      exactly the client's bytes -- read while the replica is stopped.
#   1b. the control: the Naive-RDMA baseline, whose replica CPUs apply every
#      operation, with one replica process stopped the same way: the client
#      must fail (no operation completes), so the check in 1 can fail.
#   2. faults: the same check with loss, duplication and reordering on the
#      wire: tc netem on the veths (--netem, in namespaces, when the kernel
#      has sch_netem), else the daemons' seeded fault model (--fault-*).
#   3. kill: the daemon of replica 1 is killed with SIGKILL mid-run; the
#      client must exit 1 with a clear error (not hang), and replica 1's
#      process must exit 1 saying its daemon died.
# Usage: hyperloop_chain.sh FERRY [--netns] [--ops N] [--seed S]
# Exit 77 (skipped, with the reason) when --netns cannot be set up.
set -uo pipefail
ferry=$1; shift
netns=0; ops=10000; seed=${FERRY_CHAIN_SEED:-$(( $$ * 7919 % 1000000 + 1 ))}
while [[ $# -gt 0 ]]; do
  case $1 in
    --netns) netns=1 ;;
    --ops) ops=$2; shift ;;
    --seed) seed=$2; shift ;;
    *) echo "unknown argument $1"; exit 2 ;;
  esac
  shift
done
echo "seed $seed (replay: FERRY_CHAIN_SEED=$seed)"
source "$(dirname "$0")/lib.sh"
cli_dir ferry-chain
tag=fc$(( $$ % 100000 ))
cleanup_extra() {  # the processes first: they live in the namespaces
  for p in "${pids[@]}"; do kill -CONT "$p" 2>/dev/null; kill -KILL "$p" 2>/dev/null; done
  wait 2>/dev/null
  if [[ $netns == 1 ]]; then
    for h in 0 1 2 3; do ip netns del "${tag}h$h" 2>/dev/null; done
    ip link del "${tag}br" 2>/dev/null
  fi
}
skip() { echo "SKIP: $*"; exit 77; }

# ---- hosts: an address and a command prefix each ----
declare -a ip_of run_in
if [[ $netns == 1 ]]; then
  [[ $(id -u) == 0 ]] || skip "network namespaces need root"
  command -v ip >/dev/null || skip "no ip command (iproute2)"
  net=$(( $$ % 200 + 20 ))
  ip link add "${tag}br" type bridge 2>/dev/null || skip "cannot create a bridge (no netns/bridge support here)"
  ip link set "${tag}br" up
  for h in 0 1 2 3; do
    ns=${tag}h$h
    ip netns add "$ns" || skip "cannot create network namespace $ns"
    ip link add "${tag}v$h" type veth peer name "${tag}p$h" || skip "cannot create a veth pair"
    ip link set "${tag}p$h" master "${tag}br" up
    ip link set "${tag}v$h" netns "$ns"
    ip -n "$ns" addr add "10.77.$net.$(( h + 1 ))/24" dev "${tag}v$h"
    ip -n "$ns" link set "${tag}v$h" up
    ip -n "$ns" link set lo up
    ip_of[$h]=10.77.$net.$(( h + 1 ))
    run_in[$h]="ip netns exec $ns"
  done
  echo "namespaces ${tag}h0..3 on bridge ${tag}br, 10.77.$net.1-4"
else
  for h in 0 1 2 3; do ip_of[$h]=127.0.0.1; run_in[$h]=""; done
fi

# Below the kernel's ephemeral range (ip_local_port_range, 32768-60999 by
# default): a member's outgoing CM connection must not be able to take a port
# another member is about to listen on.
base=$(( 20000 + $$ % 12000 ))
write_config() {  # port offset [system]
  local b=$(( base + $1 ))
  {
    cat <<TOML
[group]
system = "${2:-hyperloop}"
name = "smoke"
replicas = 3
region_bytes = 262144
ring_ops = 64
window = 16
connect_timeout_ms = 20000

[client]
nicd = "$dir/n0.sock"
listen = "${ip_of[0]}:$b"
TOML
    for i in 0 1 2; do
      printf '\n[[replica]]\nnicd = "%s"\nlisten = "%s:%d"\nregion = "%s"\n' \
        "$dir/n$(( i + 1 )).sock" "${ip_of[$(( i + 1 ))]}" $(( b + 1 + i )) "$dir/r$i.pm"
    done
  } >"$dir/chain.toml"
}

declare -A daemon_pid replica_pid
start_daemons() {  # extra daemon flags...
  for h in 0 1 2 3; do
    ${run_in[$h]} "$ferry" nicd --socket "$dir/n$h.sock" --bind "${ip_of[$h]}:0" --name "host$h" --spin-us 50 "$@" \
      >"$dir/nicd$h.log" 2>&1 &
    daemon_pid[$h]=$!
    pids+=($!)
  done
  for h in 0 1 2 3; do wait_for "$dir/nicd$h.log" "event=ready" 10 || die "daemon $h did not start"; done
}
stop_daemons() {
  for h in 0 1 2 3; do kill -TERM "${daemon_pid[$h]}" 2>/dev/null; done
  for h in 0 1 2 3; do wait "${daemon_pid[$h]}" 2>/dev/null; done
}
start_replicas() {
  rm -f "$dir"/r*.pm
  # Tail first: the order does not matter, each waits for its downstream.
  for i in 2 1 0; do
    ${run_in[$(( i + 1 ))]} "$ferry" hyperloop replica --config "$dir/chain.toml" --index $i >"$dir/replica$i.log" 2>&1 &
    replica_pid[$i]=$!
    pids+=($!)
  done
}
stop_replicas() {
  for i in 0 1 2; do kill -CONT "${replica_pid[$i]}"; kill -TERM "${replica_pid[$i]}"; done
  for i in 0 1 2; do
    wait "${replica_pid[$i]}"; local s=$?
    [[ $s == 0 ]] || die "replica $i exit status $s after SIGTERM"
    grep -qE "event=stop signal=SIGTERM upstream_links=(3|1)" "$dir/replica$i.log" || die "replica $i: no clean stop"
  done
}
# Runs the client with the replicas stopped (or not: $1 = stop|run), checks
# its summary and every replica's memory.
checked_run() {  # stop|run ops
  ${run_in[0]} "$ferry" hyperloop client --config "$dir/chain.toml" --ops "$2" --size 64 --outstanding 8 --json \
    --seed "$seed" --dump "$dir/client.img" --wait-for-sigusr1 --op-timeout-ms 20000 >"$dir/client.log" 2>&1 &
  local client=$!
  pids+=($client)
  wait_for "$dir/client.log" "event=waiting" 40 || die "the client did not connect"
  for i in 0 1 2; do wait_for "$dir/replica$i.log" "event=serving" 10 || die "replica $i not serving"; done
  if [[ $1 == stop ]]; then
    for i in 0 1 2; do kill -STOP "${replica_pid[$i]}"; done
    for i in 0 1 2; do
      # SIGSTOP is delivered asynchronously: a running thread stops at its
      # next return to user space, so give the group stop a moment.
      local state
      for _ in $(seq 100); do
        state=$(awk '{print $3}' "/proc/${replica_pid[$i]}/stat")
        [[ $state == T ]] && break
        sleep 0.02
      done
      [[ $state == T ]] || die "replica $i is in state $state, not stopped"
    done
    echo "replicas ${replica_pid[*]} stopped; running $2 operations"
  fi
  kill -USR1 $client
  wait $client
  local status=$?
  cat "$dir/client.log"
  [[ $status == 0 ]] || die "client exit status $status"
  local summary
  summary=$(grep '^{' "$dir/client.log")
  jq -e --argjson ops "$2" '.ok == true and .failed == 0 and .cas_mismatch == 0 and .completed == $ops' \
    <<<"$summary" >/dev/null || die "client summary: $summary"
  if [[ $1 == stop ]]; then
    for i in 0 1 2; do
      local state
      state=$(awk '{print $3}' "/proc/${replica_pid[$i]}/stat")
      [[ $state == T ]] || die "replica $i woke up during the run (state $state)"
    done
  fi
  local gcas
  gcas=$(jq -r .gcas_ops <<<"$summary")
  for i in 0 1 2; do
    # Bytes 0..7: the gCAS counter; from 64 on: the gWRITE bytes, the client's exactly.
    local counter
    counter=$(od -An -t u8 -N 8 "$dir/r$i.pm" | tr -d ' ')
    [[ $counter == "$gcas" ]] || die "replica $i counter $counter, expected $gcas"
    cmp -s -i 64 "$dir/client.img" "$dir/r$i.pm" || die "replica $i region differs from the client's bytes"
  done
  echo "every replica holds all $2 operations, each once and in order (counter $gcas)"
}

# ---- 1. replicas stopped for the whole run ----
write_config 0
start_daemons
start_replicas
checked_run stop "$ops"
stop_replicas

# ---- 1b. the control: the baseline's replica CPUs are on the data path ----
write_config 30 naive-event
start_replicas
${run_in[0]} "$ferry" hyperloop client --config "$dir/chain.toml" --ops 1000 --op-timeout-ms 2000 --json \
  --wait-for-sigusr1 >"$dir/client1b.log" 2>&1 &
client=$!
pids+=($client)
wait_for "$dir/client1b.log" "event=waiting" 40 || die "the naive client did not connect"
for i in 0 1 2; do wait_for "$dir/replica$i.log" "event=serving" 10 || die "naive replica $i not serving"; done
kill -STOP "${replica_pid[1]}"
kill -USR1 $client
wait $client
status=$?
cat "$dir/client1b.log"
[[ $status == 1 ]] || die "naive client with replica 1 stopped: exit $status, expected 1 (its CPU is needed)"
grep -q "no operation completed" "$dir/client1b.log" || die "naive client: not the expected stall"
echo "control: with a Naive-RDMA replica process stopped, the chain stalls (as it must)"
stop_replicas

# ---- 2. loss, duplication and reordering on the wire ----
write_config 10
netem=0
if [[ $netns == 1 ]]; then
  if ip netns exec "${tag}h1" tc qdisc add dev "${tag}v1" root netem loss 2% duplicate 1% delay 100us 50us \
       reorder 5% 2>"$dir/netem.err"; then
    netem=1
    for h in 0 2 3; do
      ip netns exec "${tag}h$h" tc qdisc add dev "${tag}v$h" root netem loss 2% duplicate 1% delay 100us 50us reorder 5% \
        || die "netem on host $h"
    done
    echo "tc netem on every veth: loss 2%, duplicate 1%, delay 100us+-50us, reorder 5%"
  else
    echo "SKIP netem: $(head -1 "$dir/netem.err") (the kernel lacks sch_netem); using the daemons' seeded fault model"
  fi
fi
if [[ $netem == 0 ]]; then
  stop_daemons
  start_daemons --fault-drop 0.02 --fault-duplicate 0.01 --fault-delay 0.05 --fault-delay-max-us 200 --fault-seed "$seed"
  echo "daemon fault model: drop 2%, duplicate 1%, delay (reorder) 5% up to 200us, seed $seed"
fi
start_replicas
checked_run run $(( ops / 10 ))
stop_replicas
if [[ $netem == 0 ]]; then
  stop_daemons
  start_daemons
fi

# ---- 3. a replica's daemon killed mid-run ----
write_config 20
start_replicas
${run_in[0]} "$ferry" hyperloop client --config "$dir/chain.toml" --ops 100000000 --op-timeout-ms 3000 --size 64 \
  >"$dir/client3.log" 2>&1 &
client=$!
pids+=($client)
wait_for "$dir/client3.log" "event=connected" 40 || die "the third client did not connect"
sleep 0.3
kill -KILL "${daemon_pid[2]}"
echo "killed replica 1's daemon (pid ${daemon_pid[2]})"
for _ in $(seq 300); do kill -0 $client 2>/dev/null || break; sleep 0.05; done
kill -0 $client 2>/dev/null && die "the client still runs 15 s after the daemon died"
wait $client
status=$?
cat "$dir/client3.log"
[[ $status == 1 ]] || die "client exit status $status after a replica's daemon died, expected 1"
grep -q "ferry hyperloop client: .*gone" "$dir/client3.log" || die "client: no clear error"
for _ in $(seq 100); do kill -0 "${replica_pid[1]}" 2>/dev/null || break; sleep 0.05; done
wait "${replica_pid[1]}"
s=$?
cat "$dir/replica1.log"
[[ $s == 1 ]] || die "replica 1 exit status $s after its daemon died, expected 1"
grep -q "NIC daemon at .* died" "$dir/replica1.log" || die "replica 1: no clear error"
echo "PASS"
