#!/usr/bin/env bash
# The simulator's seam lint (docs/simulation.md, "Tailwind / LogKv"): code on
# the path `ferry sim tailwind` runs as fibers must wait, sleep, read time,
# spawn and lock through ferry::Runtime and its primitives
# (include/ferry/common/runtime.h), never through std::thread, std::mutex,
# std::condition_variable, std::this_thread or the steady clock directly: one
# such call blocks the simulator's only OS thread, or reads real time into a
# run that must replay from its seed. A line that is safe anyway (a lock
# never held across a wait, file I/O that runs whole in one fiber turn) says
# so with a trailing "// sim-seam: <why>".
#
# Usage: scripts/check-sim-seams.sh   (exit 1 and the offending lines if any)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
files=(src/rpc/*.cc src/rpc/*.h include/ferry/rpc/*.h src/tailwind/*.cc src/tailwind/*.h include/ferry/tailwind/*.h
       src/store/logkv_client.cc src/store/logkv_cluster.cc src/store/logkv_control.cc src/store/logkv_server.cc
       src/store/logkv_internal.h include/ferry/store/logkv.h)
pattern='std::this_thread::|std::chrono::steady_clock|std::thread\b|std::(shared_)?mutex\b|std::condition_variable'
# Comment lines and lines marked safe are not calls to check.
if hits=$(grep -nE "$pattern" "${files[@]}" | grep -vE '^[^:]+:[0-9]+:\s*//' | grep -v 'sim-seam:'); then
  echo "check-sim-seams: blocking or real-time calls on the simulated path (use ferry::Runtime, or mark the line"
  echo "'// sim-seam: <why>' if it is safe under the simulator):"
  echo "$hits"
  exit 1
fi
echo "check-sim-seams: ${#files[@]} files clean"
