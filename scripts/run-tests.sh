#!/usr/bin/env bash
# The body of `make test`: configure, build and run every suite.
#   1. release build (assertions on): all tests, plus CLI smoke tests
#   2. ASan + UBSan build (clang): all tests
#   3. TSan build: the tests where application and engine threads share state
#   4. libFuzzer (built in the ASan tree): each fuzz target for FUZZ_SECONDS
#      (default 8), JOBS targets at a time
# Environment: JOBS (parallelism, default nproc), FUZZ_SECONDS, FUZZ_SEED, SKIP_SANITIZERS=1,
# SKIP_FUZZ=1 (for quick local runs; CI runs everything), CMAKE_GENERATOR
# (default Ninja, for new build trees; an existing tree keeps its own).
set -euo pipefail
cd "$(dirname "$0")/.."

JOBS=${JOBS:-$(nproc)}
FUZZ_SECONDS=${FUZZ_SECONDS:-8}
# Ninja starts a target's compiles before the libraries it links are built,
# which keeps both cores busy across the few large unity batches.
export CMAKE_GENERATOR=${CMAKE_GENERATOR:-Ninja}
start=$(date +%s)
step() { printf '\n==== %s (%ds)\n' "$*" "$(( $(date +%s) - start ))"; }

# ctest runs the longest tests first only once a tree has run them: a fresh
# tree starts from the durations recorded in tests/ctest-costs/ (a run on
# 2 cores), so the long campaigns and the one-at-a-time CLI tests do not end
# up last with a core idle. A tree's own record, once it has one, wins.
seed_costs() {  # dir, recorded costs
  local f=$1/Testing/Temporary/CTestCostData.txt
  [[ -s $f ]] || { mkdir -p "$(dirname "$f")" && cp "$2" "$f"; }
}

configure() {  # dir, extra cmake args...
  local dir=$1; shift
  cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
}

step "release build"
# The same configuration as `make build`/`make demo` (CMakeLists.txt sets the
# flags), so after `make demo` this builds nothing.
configure build
cmake --build build -j "$JOBS"
step "release tests"
seed_costs build tests/ctest-costs/release.txt
ctest --test-dir build --output-on-failure --no-tests=error -j "$JOBS" --timeout 300

# The ASan+UBSan tree, built with clang, holds the sanitizer test executables
# and the libFuzzer targets (FERRY_FUZZ=ON): the libraries are compiled once
# for both. clang compiles it faster than gcc did and runs its tests faster.
asan_targets=()
[[ "${SKIP_SANITIZERS:-0}" != 1 ]] && asan_targets+=(ferry_test_binaries)
[[ "${SKIP_FUZZ:-0}" != 1 ]] && asan_targets+=(ferry_fuzz_targets)
if [[ ${#asan_targets[@]} -gt 0 ]]; then
  step "ASan+UBSan build (clang; tests and fuzz targets)"
  # A tree configured with another compiler (gcc, before) starts afresh.
  if [[ -f build-asan/CMakeCache.txt ]] && ! grep -q '^CMAKE_CXX_COMPILER:.*clang++' build-asan/CMakeCache.txt; then
    rm -rf build-asan
  fi
  # -O1 -g1: the sanitizer builds are compile-bound on 2 cores; line tables
  # are enough for their reports (and libFuzzer's).
  configure build-asan -DFERRY_SANITIZE=address -DFERRY_FUZZ=ON -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG"
  cmake --build build-asan -j "$JOBS" --target "${asan_targets[@]}"
fi

if [[ "${SKIP_SANITIZERS:-0}" != 1 ]]; then
  step "ASan+UBSan tests"
  seed_costs build-asan tests/ctest-costs/asan.txt
  # Every test suite (the CLI tests need the tool, which this build skips).
  # Seed campaigns run at full default size in the release step; here they
  # check memory safety, so a smaller size keeps the step within budget.
  FERRY_RPC_POWER_SEEDS=${FERRY_RPC_POWER_SEEDS:-100} \
  FERRY_SIM_SEEDS=${FERRY_SIM_SEEDS:-60} \
  FERRY_ROCKSDB_SEEDS=${FERRY_ROCKSDB_SEEDS:-3} \
  FERRY_TAILWIND_SEEDS=${FERRY_TAILWIND_SEEDS:-1} FERRY_TW_CRASH_ROUNDS=${FERRY_TW_CRASH_ROUNDS:-2} \
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    ctest --test-dir build-asan --output-on-failure --no-tests=error -j "$JOBS" --timeout 600 -LE cli

  step "TSan build (threads)"
  configure build-tsan -DFERRY_SANITIZE=thread -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG"
  cmake --build build-tsan -j "$JOBS" --target nic_thread_tests pm_thread_tests common_tests common_thread_tests hyperloop_thread_tests rpc_thread_tests membership_thread_tests cm_tests nicd_tests hyperloop_remote_tests tailwind_thread_tests store_thread_tests
  step "TSan tests"
  seed_costs build-tsan tests/ctest-costs/tsan.txt
  # The engine-thread suite, and the multi-producer queue tests.
  FERRY_TAILWIND_SEEDS=${FERRY_TAILWIND_SEEDS:-1} FERRY_TW_CRASH_ROUNDS=${FERRY_TW_CRASH_ROUNDS:-2} \
  TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
    ctest --test-dir build-tsan --output-on-failure --no-tests=error -j "$JOBS" --timeout 600 -L threads
  TSAN_OPTIONS=halt_on_error=1 \
    ctest --test-dir build-tsan --output-on-failure --no-tests=error -j "$JOBS" --timeout 600 -R "^MpscQueue"
fi

if [[ "${SKIP_FUZZ:-0}" != 1 ]]; then
  fuzz_targets=(packet_parser_fuzz wqe_decode_fuzz nic_rx_fuzz udp_rx_fuzz naive_header_fuzz rpc_request_fuzz
                rpc_recovery_scan_fuzz etcd_response_fuzz cm_message_fuzz nicd_request_fuzz tailwind_scan_fuzz
                logkv_request_fuzz txn_log_fuzz)
  # One seed for every target, printed, so that a failing run can be replayed.
  FUZZ_SEED=${FUZZ_SEED:-$(( $(date +%s) % 1000000000 + 1 ))}
  echo "fuzz seed $FUZZ_SEED (replay: FUZZ_SEED=$FUZZ_SEED make test)"
  # Each target fuzzes a scratch copy of its seed corpus; libFuzzer exits
  # non-zero on any finding (crash, leak, timeout, OOM) or if the target
  # cannot start; its artifact lands in build-asan/.
  fuzz_one() {  # target corpus log
    cp tests/fuzz/corpus/"$1"/* "$2"/ 2>/dev/null || true
    (cd build-asan && ./"$1" -seed="$FUZZ_SEED" -max_total_time="$FUZZ_SECONDS" -print_final_stats=1 \
      "$2" >"$3" 2>&1)
  }
  # A libFuzzer process uses one core: JOBS targets run side by side, each
  # for the full FUZZ_SECONDS.
  for ((i = 0; i < ${#fuzz_targets[@]}; i += JOBS)); do
    batch=("${fuzz_targets[@]:i:JOBS}")
    step "fuzz ${batch[*]} for ${FUZZ_SECONDS}s"
    pids=() corpora=() logs=()
    for target in "${batch[@]}"; do
      corpora+=("$(mktemp -d)")
      logs+=("$(mktemp)")
      fuzz_one "$target" "${corpora[-1]}" "${logs[-1]}" &
      pids+=($!)
    done
    for j in "${!batch[@]}"; do
      rc=0
      wait "${pids[j]}" || rc=$?
      echo "${batch[j]}: $(grep -E "stat::number_of_executed_units" "${logs[j]}" || true)"
      if [[ $rc != 0 ]]; then
        echo "fuzzer ${batch[j]} failed (exit $rc, seed $FUZZ_SEED):"
        tail -n 60 "${logs[j]}"
        wait || true
        exit 1
      fi
      rm -rf "${corpora[j]}" "${logs[j]}"
    done
  done
fi

step "all tests passed"
