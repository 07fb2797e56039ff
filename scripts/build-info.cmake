# Writes OUT, a C++ source that tells the benchmarks which commit they were
# built from (and whether the tree had uncommitted changes), so that every
# recorded result says where it came from. Run at every build by the
# ferry_build_info target; OUT changes only when the commit or state does.
#   cmake -DSRC=<source dir> -DOUT=<file> -P scripts/build-info.cmake
execute_process(COMMAND git -C "${SRC}" rev-parse HEAD
  OUTPUT_VARIABLE commit OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE rc)
if(NOT rc EQUAL 0 OR commit STREQUAL "")
  set(commit "unknown")
endif()
execute_process(COMMAND git -C "${SRC}" status --porcelain --untracked-files=no
  OUTPUT_VARIABLE changes OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE rc)
if(rc EQUAL 0 AND changes STREQUAL "")
  set(dirty false)
else()
  set(dirty true)
endif()
set(content "// Generated at build time by scripts/build-info.cmake; do not edit.
#include \"build_info.h\"

namespace ferry::bench {
const char* build_commit() { return \"${commit}\"; }
bool build_dirty() { return ${dirty}; }
}  // namespace ferry::bench
")
if(EXISTS "${OUT}")
  file(READ "${OUT}" old)
else()
  set(old "")
endif()
if(NOT old STREQUAL content)
  file(WRITE "${OUT}" "${content}")
endif()
