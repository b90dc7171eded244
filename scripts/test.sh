#!/usr/bin/env bash
# Sets up (dependencies + build) and runs every test with CTest. Extra arguments go to ctest,
# e.g. `scripts/test.sh -LE slow` skips the slow ones, `scripts/test.sh -L slow` runs only them.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/setup.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cd "$root/build"
ctest --output-on-failure --timeout 900 "$@"
