#!/usr/bin/env bash
# Sets up (dependencies + build) and runs every test with CTest (without arguments: the fast tests
# in parallel on every core, then the slow ones one at a time). Extra arguments go to ctest,
# e.g. `scripts/test.sh -LE slow` skips the slow ones, `scripts/test.sh -L slow` runs only them.
# Without arguments (the full run, as CI does) it then runs the communication and data-parallel
# tests once more under ThreadSanitizer (scripts/test_tsan.sh, a second build tree); set
# MEGASCALE_TSAN=0 to skip that, or MEGASCALE_TSAN=1 to add it to a run with arguments.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/setup.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
tsan="${MEGASCALE_TSAN:-$(( $# == 0 ))}"
if [ $# -eq 0 ]; then
  # The full run (CI): the fast tests on every core (the fast suite passes at -j2 on 2 cores; the
  # driver tests' detection bounds leave room for a neighbour test's load), then the slow ones one
  # at a time (emulated hosts, memory recovery and hang tests time faults under a known load).
  jobs="$(nproc 2>/dev/null || echo 2)"
  fast_rc=0
  (cd "$root/build" && ctest --output-on-failure --timeout 900 -LE slow -j "$jobs") || fast_rc=$?
  (cd "$root/build" && ctest --output-on-failure --timeout 900 -L slow)
  [ "$fast_rc" = 0 ] || { echo "[test] fast tests failed (exit $fast_rc)" >&2; exit "$fast_rc"; }
else
  (cd "$root/build" && ctest --output-on-failure --timeout 900 "$@")
fi
if [ "$tsan" = 1 ]; then
  echo "[test] ThreadSanitizer: communication and data-parallel tests (scripts/test_tsan.sh)"
  "$root/scripts/test_tsan.sh"
fi
