#!/usr/bin/env bash
# Installs the Debian packages Ferry needs, only those missing.
# Usage: scripts/install-deps.sh [--check]
#   --check  list missing packages and exit 1 if any (installs nothing).
# Runs apt-get as root (or through sudo when available). Idempotent and quiet
# when everything is present, so `make demo` / `make test` can call it every time.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  clang libclang-rt-14-dev          # libFuzzer and sanitizer runtimes for clang builds
  libgtest-dev libgmock-dev         # GoogleTest under ctest
  libcli11-dev                      # CLI parsing for the ferry tool
  libfmt-dev                        # formatting
  nlohmann-json3-dev                # JSON output of benchmarks
  gnuplot-nox                       # plots of benchmark JSON
  jq                                # JSON -> table for plot scripts
  python3                           # the layer check (scripts/check-layers.py, ctest `layers`)
  libpmem2-dev                      # persistent-memory mapping, persist/flush/drain, non-temporal memcpy
  libxxhash-dev                     # XXH3-64 checksums of RPC requests and PM records
  libisal-dev                       # ISA-L CRC32C of PmKv records (and the RoCEv2 ICRC)
  stress-ng                         # CPU load from a separate executable in benchmarks (never a fork of the bench)
  git                               # benchmarks record the commit they were built from
  etcd-server                       # membership store; the membership tests start a real etcd on loopback
  libcurl4-openssl-dev              # HTTP client for etcd's v3 JSON gateway (membership/)
  libtomlplusplus-dev               # TOML configuration of the ferry services (hyperloop replica/client)
  iproute2                          # network namespaces and veth pairs for the multi-host tests
  librocksdb-dev                    # RocksDB whose write-ahead log is replicated with HyperLoop Append (src/rocksdb/)
  redis-server                      # the real peer of `ferry bench store`: a primary and two replicas, SET + WAIT 2 0
  libhiredis-dev                    # Redis's own C client, for that peer (no hand-written RESP)
  libibverbs-dev                    # verbs.h's structure layouts for Ferry's libibverbs.so.1 (src/verbs/)
  ibverbs-utils perftest            # unmodified verbs programs run on it in the tests (ibv_devinfo, ibv_rc_pingpong, ib_write_lat, ...)
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [[ ${#missing[@]} -eq 0 ]]; then
  exit 0
fi

if [[ "${1:-}" == "--check" ]]; then
  echo "missing Debian packages: ${missing[*]}" >&2
  exit 1
fi

echo "ferry: installing missing Debian packages: ${missing[*]}"
run_root=()
if [[ $(id -u) -ne 0 ]]; then
  if command -v sudo >/dev/null 2>&1; then
    run_root=(sudo)
  else
    echo "ferry: need root (or sudo) to install: ${missing[*]}" >&2
    exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
if ! "${run_root[@]}" apt-get install -y --no-install-recommends "${missing[@]}" >/tmp/ferry-apt.log 2>&1; then
  echo "ferry: apt-get install failed; refreshing package lists and retrying" >&2
  "${run_root[@]}" apt-get update >>/tmp/ferry-apt.log 2>&1 || true
  if ! "${run_root[@]}" apt-get install -y --no-install-recommends "${missing[@]}" >>/tmp/ferry-apt.log 2>&1; then
    echo "ferry: could not install ${missing[*]}; see /tmp/ferry-apt.log" >&2
    tail -20 /tmp/ferry-apt.log >&2
    exit 1
  fi
fi
