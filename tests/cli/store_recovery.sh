#!/usr/bin/env bash
# HyperLoop chain recovery across processes for `ferry store`: a real etcd,
# five NIC daemons (a client host, three replica hosts and a spare's host),
# three `ferry store replica --index` processes, one `--spare`, and a client,
# on loopback, described by one TOML file with a [membership] table.
#   1. the client sets the store up (view 1 = r0,r1,r2) and puts, printing
#      event=progress every 10 puts.
#   2. after KILL_AT puts replica 1 gets SIGKILL, the client still putting:
#      the put in flight (or the next) times out,
#      the manager names r1 (it stopped beating), spare0 takes its place in
#      view 2 = r0,r2,spare0 (the spare copies both regions from r2 first),
#      both groups reconnect, the log is reconciled, and every put completes.
#   3. the client reads every key back from every member of view 2 through
#      their read services and scans their tables: every value exact. The
#      spare's region file holds the last key.
#   4. r1 restarted with its old --index exits 3: it was removed.
#   5. a second store (another chain in the same etcd) without spares loses
#      a replica: its client exits 1 saying no spare is left, and the
#      survivors' regions keep what was put (nothing is formatted over).
#   6. a third store's put fails while every member still beats (a NIC
#      daemon hangs, the replica process does not): the client exits 1
#      saying there is nothing to replace.
# Exit 77 (ctest SKIP_RETURN_CODE) when /usr/bin/etcd is not installed.
# Usage: store_recovery.sh FERRY [--puts N] [--kill-at K] [--victim I]
# (--victim 0 or 2 kills the head or the tail instead of replica 1.)
# --freeze: instead of SIGKILL, the victim's process and its host's NIC
# daemon get SIGSTOP (a host that hangs, or is cut off); after the recovery
# they get SIGCONT, and the stale member must see that it was removed and
# exit 3 by itself, serving nothing.
set -uo pipefail
ferry=$1; shift
puts=300
kill_at=100
victim=1
freeze=0
while [[ $# -gt 0 ]]; do
  case $1 in
    --puts) puts=$2; shift ;;
    --kill-at) kill_at=$2; shift ;;
    --victim) victim=$2; shift ;;
    --freeze) freeze=1 ;;
    *) echo "unknown argument $1"; exit 2 ;;
  esac
  shift
done
etcd_bin=/usr/bin/etcd
if [[ ! -x $etcd_bin ]]; then
  echo "SKIP: $etcd_bin not found (scripts/install-deps.sh installs Debian's etcd-server)"
  exit 77
fi
source "$(dirname "$0")/lib.sh"
cli_dir ferry-recovery
etcd_pid=
cleanup_extra() {
  # etcd runs under `timeout` (so it goes away by itself if this script is
  # killed outright): TERM reaches etcd through it, KILL would orphan it.
  if [[ -n $etcd_pid ]]; then kill -TERM "$etcd_pid" 2>/dev/null; wait "$etcd_pid" 2>/dev/null; fi
}
t0=$(date +%s.%N)
elapsed() { awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }

# Below the kernel's ephemeral range: no outgoing connection takes a port a
# member is about to listen on.
base=$(( 20000 + $$ % 12000 ))
etcd_client=$(( base + 10 ))
etcd_peer=$(( base + 11 ))
timeout 120 "$etcd_bin" --name=ferry-recovery --data-dir="$dir/etcd" \
  --listen-client-urls="http://127.0.0.1:$etcd_client" --advertise-client-urls="http://127.0.0.1:$etcd_client" \
  --listen-peer-urls="http://127.0.0.1:$etcd_peer" --initial-advertise-peer-urls="http://127.0.0.1:$etcd_peer" \
  --initial-cluster="ferry-recovery=http://127.0.0.1:$etcd_peer" --initial-cluster-state=new >"$dir/etcd.log" 2>&1 &
etcd_pid=$!
for _ in $(seq 200); do
  curl -fsS "http://127.0.0.1:$etcd_client/health" 2>/dev/null | grep -q true && break
  sleep 0.05
done
curl -fsS "http://127.0.0.1:$etcd_client/health" 2>/dev/null | grep -q true || die "etcd did not come up"

{
  cat <<TOML
[store]
name = "rec"
replicas = 3
log_bytes = 8192                    # wraps several times before the kill: the joining spare must copy, not replay
slots = 512
key_max = 16
value_max = 64
locks = 16
connect_timeout_ms = 10000

[membership]
etcd = "http://127.0.0.1:$etcd_client"
cluster = "ferry-test"
heartbeat_ms = 50
missed_beats = 5

[client]
nicd = "$dir/n0.sock"
listen = "127.0.0.1:$base"
TOML
  for i in 0 1 2; do
    printf '\n[[replica]]\nnicd = "%s"\nlisten = "127.0.0.1:%d"\nregion = "%s"\n' \
      "$dir/n$(( i + 1 )).sock" $(( base + 1 + i )) "$dir/r$i.pm"
  done
  printf '\n[[spare]]\nnicd = "%s"\nlisten = "127.0.0.1:%d"\nregion = "%s"\n' \
    "$dir/n4.sock" $(( base + 4 )) "$dir/spare0.pm"
} >"$dir/store.toml"

for h in 0 1 2 3 4; do
  "$ferry" nicd --socket "$dir/n$h.sock" --bind "127.0.0.1:0" --name "host$h" --spin-us 50 >"$dir/nicd$h.log" 2>&1 &
  nicd_pid[$h]=$!
  pids+=($!)
done
for h in 0 1 2 3 4; do wait_for "$dir/nicd$h.log" "event=ready" 10 || die "daemon $h did not start"; done

declare -a replica_pid nicd_pid
for i in 2 1 0; do
  "$ferry" store replica --config "$dir/store.toml" --index $i >"$dir/replica$i.log" 2>&1 &
  replica_pid[$i]=$!
  pids+=($!)
done
"$ferry" store replica --config "$dir/store.toml" --spare 0 >"$dir/spare0.log" 2>&1 &
spare_pid=$!
pids+=($spare_pid)
wait_for "$dir/spare0.log" "event=spare" 10 || die "the spare did not start"

# ---- 1. setup and the first puts ----
"$ferry" store client --config "$dir/store.toml" --puts "$puts" --value-bytes 48 --verify --scan-page 40 \
  --progress-every 10 --op-timeout-ms 1000 >"$dir/client.log" 2>&1 &
client=$!
pids+=($client)

# ---- 2. the victim (replica 1) dies while the client puts ----
# The progress lines come every 10 puts; the kill lands within the next few
# (the client does not wait for it), so usually in the middle of a put.
survivors=()
for i in 0 1 2; do [[ $i != "$victim" ]] && survivors+=($i); done
view2="r${survivors[0]},r${survivors[1]},spare0"
wait_for "$dir/client.log" "event=progress puts=$kill_at " 40 || die "the client did not reach $kill_at puts"
if (( freeze )); then
  kill -STOP "${replica_pid[$victim]}" "${nicd_pid[$(( victim + 1 ))]}"
  t_kill=$(date +%s.%N)
else
  kill -KILL "${replica_pid[$victim]}"
  t_kill=$(date +%s.%N)
  wait "${replica_pid[$victim]}" 2>/dev/null
fi
grep -q "event=membership .* version=1 members=r0,r1,r2 " "$dir/client.log" || die "view 1 is not r0,r1,r2"
echo "$(elapsed) s: $kill_at puts done; $( (( freeze )) && echo froze || echo SIGKILLed) replica $victim" \
  "(pid ${replica_pid[$victim]}) with the client putting"
wait_exit $client 40
status=$?
t_done=$(date +%s.%N)
grep -E "event=(put_failed|failed|view|recovered|done)" "$dir/client.log"
[[ $status == 0 ]] || die "client exit status $status"
grep -q "event=failed member=r$victim " "$dir/client.log" || die "the client did not name r$victim as failed"
grep -q "event=view version=2 members=$view2 " "$dir/client.log" || die "view 2 is not $view2"
grep -q "event=recovered view=2 " "$dir/client.log" || die "no recovery"
grep -q "event=done puts=$puts .* mismatches=0 view=2 members=$view2 recoveries=1" "$dir/client.log" ||
  die "not every put completed and verified over view 2"
# The joining member copies from its upstream neighbour: the last survivor.
grep -q "event=copied .* from=r${survivors[1]} " "$dir/spare0.log" ||
  die "the spare did not copy its regions from r${survivors[1]}"
for f in "replica${survivors[0]}" "replica${survivors[1]}" spare0; do
  grep -q "event=rebuilt store=rec id=.* view=2 " "$dir/$f.log" || die "$f did not rebuild for view 2"
done
awk -v a="$t_kill" -v b="$t_done" -v n=$(( puts - kill_at )) \
  'BEGIN { printf "kill to client exit (recovery, %d remaining puts, verification): %.1f s\n", n, b - a }'

# ---- 3. the new member holds the data ----
last=$(printf 'key%06d' $(( puts - 1 )))
grep -qa "$last" "$dir/spare0.pm" || die "the spare's region file lacks $last"
grep -qa "$last" "$dir/r$victim.pm" && die "the killed replica's region file holds $last, written after it died"

# ---- 4. the removed member cannot come back ----
if (( freeze )); then
  # The stale member wakes up with its old chain: its next beat reads a view
  # without it, and it exits 3 by itself.
  kill -CONT "${nicd_pid[$(( victim + 1 ))]}" "${replica_pid[$victim]}"
  wait_exit "${replica_pid[$victim]}" 10
  s=$?
  [[ $s == 3 ]] || die "the stale r$victim exited $s, not 3"
  grep -q "event=removed store=rec id=r$victim not_in_view=2" "$dir/replica$victim.log" ||
    die "the stale r$victim did not say it was removed"
  grep "event=removed" "$dir/replica$victim.log"
fi
"$ferry" store replica --config "$dir/store.toml" --index "$victim" >"$dir/again.log" 2>&1
s=$?
[[ $s == 3 ]] || die "r$victim restarted with its old --index exited $s, not 3"
grep -q "event=removed store=rec id=r$victim removed_in_view=2" "$dir/again.log" || die "no event=removed line"
grep -q "removed from the chain" "$dir/again.log" || die "no clear removed message"
cat "$dir/again.log"

for p in "${replica_pid[${survivors[0]}]}" "${replica_pid[${survivors[1]}]}" "$spare_pid"; do kill -TERM "$p"; done
for p in "${replica_pid[${survivors[0]}]}" "${replica_pid[${survivors[1]}]}" "$spare_pid"; do
  wait "$p"; s=$?
  [[ $s == 0 ]] || die "a member exited $s after SIGTERM"
done
echo "$(elapsed) s: recovery passed"
if (( freeze )); then  # the failure paths below are the same for both modes
  echo "PASS ($(elapsed) s)"
  exit 0
fi

# ---- 5. no spare left: a second store (another chain in etcd) without
# [[spare]] loses a replica; its client fails clearly with exit 1 and
# formats nothing over the survivors ----
# Another store $1 (its own chain in etcd, no spare) on the same hosts:
# three replicas and a client that waits for SIGUSR1 after 20 of 40 puts.
small_chain() {
  sed -e "s/^name = \"rec\"/name = \"$1\"/" -e '/^\[\[spare\]\]/,$d' \
    -e "s|/r\([0-9]\).pm|/$1\1.pm|" "$dir/store.toml" >"$dir/$1.toml"
  for i in 2 1 0; do
    "$ferry" store replica --config "$dir/$1.toml" --index $i >"$dir/$1$i.log" 2>&1 &
    replica_pid[$i]=$!
    pids+=($!)
  done
  "$ferry" store client --config "$dir/$1.toml" --puts 40 --value-bytes 48 --pause-after-puts 20 \
    --op-timeout-ms 1000 >"$dir/$1-client.log" 2>&1 &
  client=$!
  pids+=($client)
  wait_for "$dir/$1-client.log" "event=progress puts=20 " 40 || die "store $1's client did not reach 20 puts"
}
small_chain nospare
kill -KILL "${replica_pid[1]}"
wait "${replica_pid[1]}" 2>/dev/null
kill -USR1 $client
wait_exit $client 40
s=$?
grep -E "event=(failed|view|recovered) |no spare" "$dir/nospare-client.log"
[[ $s == 1 ]] || die "the client without a spare exited $s, not 1"
grep -q "no spare is left" "$dir/nospare-client.log" || die "no clear message about the missing spare"
grep -q "event=view version=2" "$dir/nospare-client.log" && die "a view was committed without a spare"
for i in 0 2; do
  grep -qa "key000019" "$dir/nospare$i.pm" || die "replica $i's region lost key000019 after the failed recovery"
  kill -TERM "${replica_pid[$i]}"
  wait "${replica_pid[$i]}" || true
done

# ---- 6. a put fails but every member keeps beating (replica 1's NIC daemon
# hangs, its process does not): nobody to replace, the client exits 1 ----
small_chain nofail
kill -STOP "${nicd_pid[2]}"
kill -USR1 $client
wait_exit $client 40
s=$?
kill -CONT "${nicd_pid[2]}"
grep -E "event=(put_failed|failed|view) |missed" "$dir/nofail-client.log"
[[ $s == 1 ]] || die "the client with no failed member exited $s, not 1"
grep -q "nothing to replace" "$dir/nofail-client.log" || die "no clear message about the missing failed member"
grep -q "event=failed" "$dir/nofail-client.log" && die "a member was named failed while every member beat"
for i in 0 1 2; do kill -TERM "${replica_pid[$i]}"; wait "${replica_pid[$i]}" || true; done
echo "PASS ($(elapsed) s)"
