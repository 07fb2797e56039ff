#!/usr/bin/env bash
# Unmodified verbs programs (Debian's ibverbs-utils) on Ferry: two `ferry
# nicd` daemons, each a RoCE v2 device, and the programs loading Ferry's
# libibverbs.so.1 through LD_LIBRARY_PATH (docs/verbs-compat.md). On
# loopback each daemon has a loopback address of its own on the RoCE port;
# with --netns each is in a network namespace of its own on a bridge.
#   verbs_programs.sh FERRY LIBDIR [--netns]
# Checks: ibv_devices and ibv_devinfo describe the daemons; ibv_rc_pingpong
# (polling and events, several sizes, with its buffer check),
# ibv_srq_pingpong and perftest's ib_{write,read,send}_{lat,bw} and
# ib_atomic_lat (default sizes; on loopback -a too) finish and report
# results; an unsupported QP type (ibv_ud_pingpong) fails
# with the program's own error, not a crash; without a daemon there is no
# device; a daemon killed under a running ib_write_bw makes it fail (its
# CQ poll errs), not hang. Exit 77 (skipped, with the reason) when a program or the
# namespaces are missing.
set -uo pipefail
ferry=$1
libdir=$2
netns=0
[[ ${3:-} == --netns ]] && netns=1
source "$(dirname "$0")/lib.sh"
cli_dir ferry-verbs
tag=fv$(( $$ % 100000 ))
skip() { echo "SKIP: $*"; exit 77; }
cleanup_extra() {
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
  wait 2>/dev/null
  if [[ $netns == 1 ]]; then
    for h in 0 1; do ip netns del "${tag}h$h" 2>/dev/null; done
    ip link del "${tag}br" 2>/dev/null
  fi
}
for p in ibv_devices ibv_devinfo ibv_rc_pingpong ibv_srq_pingpong ibv_ud_pingpong ss; do
  command -v $p >/dev/null || skip "$p is not installed (ibverbs-utils; scripts/install-deps.sh)"
done

declare -a ip_of run_in
net=$(( $$ % 200 + 20 ))
if [[ $netns == 1 ]]; then
  [[ $(id -u) == 0 ]] || skip "network namespaces need root"
  command -v ip >/dev/null || skip "no ip command (iproute2)"
  ip link add "${tag}br" type bridge 2>/dev/null || skip "cannot create a bridge (no netns/bridge support here)"
  ip link set "${tag}br" up
  for h in 0 1; do
    ns=${tag}h$h
    ip netns add "$ns" || skip "cannot create network namespace $ns"
    ip link add "${tag}v$h" type veth peer name "${tag}p$h" || skip "cannot create a veth pair"
    ip link set "${tag}p$h" master "${tag}br" up
    ip link set "${tag}v$h" netns "$ns"
    ip -n "$ns" addr add "10.78.$net.$(( h + 1 ))/24" dev "${tag}v$h"
    ip -n "$ns" link set "${tag}v$h" up
    ip -n "$ns" link set lo up
    ip_of[$h]=10.78.$net.$(( h + 1 ))
    run_in[$h]="ip netns exec $ns"
  done
else
  # 127.<net>.<n>.1 and .2: this run's own addresses on the RoCE port.
  n=$(( ($$ / 200) % 250 + 1 ))
  for h in 0 1; do ip_of[$h]=127.$net.$n.$(( h + 1 )); run_in[$h]=""; done
fi
echo "daemons at ${ip_of[0]}:4791 and ${ip_of[1]}:4791"

for h in 0 1; do
  ${run_in[$h]} "$ferry" nicd --bind "${ip_of[$h]}:4791" --socket "$dir/nicd$h.sock" --spin-us 50 \
    >"$dir/nicd$h.log" 2>&1 &
  pids+=($!)
done
for h in 0 1; do wait_for "$dir/nicd$h.log" "event=ready" 10 || die "daemon $h did not start"; done

# run H PROGRAM ARGS...: PROGRAM on host H, attached to its daemon.
run() {
  local h=$1; shift
  ${run_in[$h]} env LD_LIBRARY_PATH="$libdir" FERRY_NICD="$dir/nicd$h.sock" FERRY_VERBS_DEBUG=1 timeout 60 "$@"
}

# ---- device listing and attributes ----
out=$(env LD_LIBRARY_PATH="$libdir" FERRY_NICD="$dir/nicd0.sock,$dir/nicd1.sock" ibv_devices 2>&1)
echo "$out"
grep -q "ferry0" <<<"$out" && grep -q "ferry1" <<<"$out" || die "ibv_devices does not list both daemons"
out=$(run 1 ibv_devinfo -v 2>&1)
echo "$out" | head -20
grep -q "hca_id:.*ferry0" <<<"$out" || die "ibv_devinfo: no ferry0"
grep -q "state:.*PORT_ACTIVE" <<<"$out" || die "ibv_devinfo: port not active"
grep -q "link_layer:.*Ethernet" <<<"$out" || die "ibv_devinfo: not a RoCE port"
grep -q "::ffff:${ip_of[1]}.*RoCE v2" <<<"$out" || die "ibv_devinfo: GID[0] is not ::ffff:${ip_of[1]} (RoCE v2)"
out=$(env LD_LIBRARY_PATH="$libdir" FERRY_NICD="$dir/none.sock" ibv_devinfo 2>&1)
status=$?
echo "$out"
# (ibv_devinfo returns -1 then: status 255, not a signal.)
[[ $status == 255 ]] && grep -qi "no IB devices found" <<<"$out" || die "no daemon: expected 'No IB devices found'"

# pair NAME PROGRAM ARGS...: the server on host 0, the client on host 1
# once the server listens on its TCP port; both must exit 0.
port=$(( 20000 + $$ % 20000 ))
pair() {
  local name=$1; shift
  port=$(( port + 1 ))
  run 0 "$@" -p $port >"$dir/$name-server.out" 2>&1 &
  local server=$!
  pids+=($server)
  for _ in $(seq 200); do
    ${run_in[0]} ss -ltn 2>/dev/null | grep -q ":$port " && break
    sleep 0.05
  done
  run 1 "$@" -p $port "${ip_of[0]}" >"$dir/$name-client.out" 2>&1
  local client_status=$?
  wait $server
  local server_status=$?
  echo "--- $name: server $server_status, client $client_status"
  cat "$dir/$name-server.out" "$dir/$name-client.out"
  [[ $server_status == 0 && $client_status == 0 ]] || die "$name failed"
}
pingpong() {  # and the rate it reports
  pair "$@" -g 0
  grep -q "iters in" "$dir/$1-client.out" || die "$1: no rate reported"
}
perftest() {  # and at least one result row per size it ran
  local name=$1
  pair "$@" -x 0
  grep -qE "^ +[0-9]+ +[0-9]+ +[0-9.]+" "$dir/$name-client.out" || die "$name: no result row"
}
pingpong rc_default ibv_rc_pingpong --chk
pingpong rc_1byte ibv_rc_pingpong -s 1 -n 2000 --chk
pingpong rc_64k ibv_rc_pingpong -s 65536 -n 200 --chk
if [[ $netns == 0 ]]; then
  pingpong rc_mtu4096 ibv_rc_pingpong -s 10000 -m 4096 -n 200 --chk
else
  # The veths' 1500-byte MTU carries a 1024-byte path MTU at most: a
  # 4096-byte one is refused at RTR, and the program exits on its own.
  port=$(( port + 1 ))
  run 0 ibv_rc_pingpong -g 0 -m 4096 -p $port >"$dir/mtu-server.out" 2>&1 &
  server=$!
  for _ in $(seq 200); do
    ${run_in[0]} ss -ltn 2>/dev/null | grep -q ":$port " && break
    sleep 0.05
  done
  run 1 ibv_rc_pingpong -g 0 -m 4096 -p $port "${ip_of[0]}" >"$dir/mtu-client.out" 2>&1
  client_status=$?
  wait $server
  server_status=$?
  cat "$dir/mtu-server.out" "$dir/mtu-client.out"
  [[ $server_status == 1 ]] || die "path MTU 4096 over a 1500-byte link: server status $server_status, expected 1"
  grep -q "path_mtu 4096 exceeds 1024" "$dir/mtu-server.out" || die "path MTU 4096: the library did not say why"
  [[ $client_status -lt 128 ]] || die "path MTU 4096: client died of signal $(( client_status - 128 ))"
fi
pingpong rc_events ibv_rc_pingpong -e -n 500 --chk
pingpong srq ibv_srq_pingpong -n 200

# ---- perftest, default sizes and (loopback) every size ----
if command -v ib_write_lat >/dev/null; then
  for t in ib_write_lat ib_write_bw ib_read_lat ib_read_bw ib_send_lat ib_send_bw ib_atomic_lat; do
    perftest $t $t
  done
  if [[ $netns == 0 ]]; then
    # -a: 2 B to 8 MiB; fewer iterations than the default 1000 per size
    # (the largest sizes take seconds each through the emulated NIC).
    for t in ib_write_lat ib_read_lat ib_send_lat ib_write_bw; do
      perftest $t-all $t -a -n 20
      [[ $(grep -cE "^ +8388608 " "$dir/$t-all-client.out") -ge 1 ]] || die "$t -a did not reach 8 MiB"
    done
  fi
else
  echo "perftest is not installed: its programs were not run"
fi

# ---- what the NIC lacks: the program's own error, no crash ----
port=$(( port + 1 ))
run 0 ibv_ud_pingpong -g 0 -p $port >"$dir/ud.out" 2>&1
status=$?
cat "$dir/ud.out"
[[ $status != 0 && $status -lt 128 ]] || die "ibv_ud_pingpong: expected a clean failure, got status $status"
grep -q "Couldn't create QP" "$dir/ud.out" || die "ibv_ud_pingpong: unexpected error"
grep -q "only RC queue pairs" "$dir/ud.out" || die "ibv_ud_pingpong: the library did not say why"
# ---- a daemon that dies under a running program: an error, not a hang ----
if command -v ib_write_bw >/dev/null; then
  port=$(( port + 1 ))
  run 0 ib_write_bw -x 0 -D 30 -p $port >"$dir/death-server.out" 2>&1 &
  server=$!
  pids+=($server)
  for _ in $(seq 200); do
    ${run_in[0]} ss -ltn 2>/dev/null | grep -q ":$port " && break
    sleep 0.05
  done
  run 1 stdbuf -oL ib_write_bw -x 0 -D 30 -p $port "${ip_of[0]}" >"$dir/death-client.out" 2>&1 &  # (line-buffered: its progress shows)
  client=$!
  pids+=($client)
  wait_for "$dir/death-client.out" "MsgRate" 10 || die "ib_write_bw did not start its run"
  sleep 1
  kill -KILL "${pids[1]}"  # host 1's daemon, under the client
  wait_exit $client 20
  client_status=$?
  wait_exit $server 20
  server_status=$?
  echo "--- daemon killed under ib_write_bw: client $client_status, server $server_status"
  cat "$dir/death-client.out"
  [[ $client_status -ge 1 && $client_status -lt 124 ]] || die "client: expected an error exit, got $client_status"
  [[ $server_status -ge 1 && $server_status -lt 124 ]] || die "server: expected an error exit, got $server_status"
  grep -q "poll CQ failed" "$dir/death-client.out" || die "client: no completion error reported"
fi
echo "PASS"
