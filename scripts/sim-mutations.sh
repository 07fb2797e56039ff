#!/usr/bin/env bash
# The simulator's mutation check (docs/simulation.md, "Mutations"): each
# patch in tests/sim/mutations/ puts a bug back into the production code --
# a fix of the data-safety issue reverted, or a classic bug injected -- and
# the simulator must find it. For each patch: apply it to a scratch copy of
# the committed tree, build `ferry`, run `ferry sim <system>` over up to
# MAX seeds and report the first seed that fails and the invariant it broke.
#
# Usage: scripts/sim-mutations.sh [--max N] [--build DIR] [PATCH...]
#   --max N     seeds per mutation before it counts as not found (default 10000)
#   --build DIR the scratch tree (default /tmp/ferry-mutations; reused, so a
#               second run rebuilds only what the patches touch)
#   PATCH       patch files (default: every tests/sim/mutations/*.patch)
# The system a patch targets is the first word of its file name
# (juneberry-..., tailwind-...; hyperloop-... is hyperloop-store). Prints a Markdown table.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
max=10000
scratch=/tmp/ferry-mutations
patches=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --max) max=$2; shift 2 ;;
    --build) scratch=$2; shift 2 ;;
    -h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "sim-mutations: unknown option $1" >&2; exit 2 ;;
    *) patches+=("$1"); shift ;;
  esac
done
if [[ ${#patches[@]} -eq 0 ]]; then
  patches=("$root"/tests/sim/mutations/*.patch)
fi

# The scratch tree: the committed HEAD, exported (not a worktree, so the
# repository's state is never touched).
# Extracted apart, then copied over only where the content differs, so that
# a file changed since the last build gets a new mtime and is rebuilt (tar
# would give it the commit's time, older than a stale object built from a
# patched copy).
rm -rf "$scratch/head"
mkdir -p "$scratch/src" "$scratch/head"
git -C "$root" archive HEAD | tar -x -C "$scratch/head"
(cd "$scratch/head" && find . -type f -print0) | while IFS= read -r -d '' f; do
  if ! cmp -s "$scratch/head/$f" "$scratch/src/$f"; then
    mkdir -p "$(dirname "$scratch/src/$f")"
    cp "$scratch/head/$f" "$scratch/src/$f"
  fi
done
if [[ ! -f "$scratch/build/build.ninja" ]]; then
  cmake -S "$scratch/src" -B "$scratch/build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFERRY_TESTS=OFF >/dev/null
fi

echo "| mutation | system | found at seed (of $max) | invariant reported | seconds |"
echo "|---|---|---|---|---|"
for patch in "${patches[@]}"; do
  name=$(basename "$patch" .patch)
  system=${name%%-*}
  [[ $name == hyperloop-* ]] && system=hyperloop-store
  if ! patch -d "$scratch/src" -p1 --forward --quiet <"$patch"; then
    echo "| $name | $system | patch does not apply | - | - |"
    continue
  fi
  if ! ninja -C "$scratch/build" ferry >"$scratch/build.log" 2>&1; then
    echo "| $name | $system | does not build (see $scratch/build.log) | - | - |"
    patch -d "$scratch/src" -p1 -R --quiet <"$patch"
    continue
  fi
  start=$(date +%s)
  status=0
  out=$("$scratch/build/ferry" sim "$system" --seeds "$max" --quiet --no-shrink --stop-after 1 --tail 0 2>&1) || status=$?
  secs=$(($(date +%s) - start))
  seed=$(grep -m1 '^FAIL seed=' <<<"$out" | sed 's/^FAIL seed=\([0-9]*\).*/\1/' || true)
  broke=$(grep -m1 '^FAIL seed=' <<<"$out" | sed 's/.* broke=//' || true)
  uncovered=$(grep '^COVERAGE ' <<<"$out" | sed 's/^COVERAGE \([^:]*\):.*/\1/' | paste -sd, - || true)
  if [[ -n "$seed" ]]; then
    echo "| $name | $system | $seed | $broke | $secs |"
  elif [[ -n "$uncovered" ]]; then
    # No seed broke an invariant, but the campaign missed coverage its
    # system requires (System::must_cover): found by the campaign as a whole.
    echo "| $name | $system | the campaign ($max seeds): $uncovered never met | coverage | $secs |"
  elif [[ $status -ne 0 ]]; then
    # The mutant died (an assertion, a crash): found, in the 100 seeds after
    # the last progress line.
    done_seeds=$(grep -o '^\.\.\. [0-9]* seeds' <<<"$out" | tail -1 | grep -o '[0-9]*' || echo 0)
    echo "| $name | $system | $((done_seeds + 1))-$((done_seeds + 100)) (the process died, exit $status: $(tail -1 <<<"$out" | cut -c1-80)) | crash | $secs |"
  else
    echo "| $name | $system | not found | - | $secs |"
  fi
  patch -d "$scratch/src" -p1 -R --quiet <"$patch"
done
