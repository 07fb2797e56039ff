// Which source the benchmarks were built from, for the provenance of every
// recorded result (generated at build time by scripts/build-info.cmake).
#pragma once

namespace ferry::bench {

// The commit (40 hex digits), or "unknown" outside a git checkout.
const char* build_commit();
// True if tracked files differed from that commit when it was built.
bool build_dirty();

}  // namespace ferry::bench
