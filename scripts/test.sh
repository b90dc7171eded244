#!/usr/bin/env bash
# Sets up (dependencies + build) and runs every test with CTest. Extra arguments go to ctest,
# e.g. `scripts/test.sh -LE slow` skips the slow ones, `scripts/test.sh -L slow` runs only them.
# Without arguments (the full run, as CI does) it then runs the communication and data-parallel
# tests once more under ThreadSanitizer (scripts/test_tsan.sh, a second build tree); set
# MEGASCALE_TSAN=0 to skip that, or MEGASCALE_TSAN=1 to add it to a run with arguments.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/setup.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
tsan="${MEGASCALE_TSAN:-$(( $# == 0 ))}"
(cd "$root/build" && ctest --output-on-failure --timeout 900 "$@")
if [ "$tsan" = 1 ]; then
  echo "[test] ThreadSanitizer: communication and data-parallel tests (scripts/test_tsan.sh)"
  "$root/scripts/test_tsan.sh"
fi
