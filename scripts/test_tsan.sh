#!/usr/bin/env bash
# ThreadSanitizer run of the communication, the data-, tensor- and pipeline-parallel and the
# checkpoint (copier, writer, signal thread) tests: a second build tree
# (build-tsan, -DMEGASCALE_SANITIZE_THREAD=ON, no benchmarks) with only the targets those tests
# need, then ctest on them. The engines underneath (Gloo, OpenMPI, libgomp, oneDNN) are not
# instrumented; tools/tsan.supp names what is suppressed and why. Extra arguments go to ctest.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$root/build-tsan"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMEGASCALE_SANITIZE_THREAD=ON \
  -DMEGASCALE_BUILD_BENCH=OFF >/dev/null
cmake --build "$build" -j"$(nproc)" --target megascale comm_check test_comm test_comm_streams test_rank_grid test_tp_equivalence test_pp_equivalence \
  test_dp_buckets test_dp_equivalence test_checkpoint_resume
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# halt_on_error: a report fails the test (the process exits 66 at the first race).
# ignore_noninstrumented_modules: memory accesses of interceptors (memcpy, read, ...) called from
# libraries not built with TSan (OpenMPI and its plugins, Gloo) are not checked; see tools/tsan.supp.
export TSAN_OPTIONS="halt_on_error=1 exitcode=66 second_deadlock_stack=1 ignore_noninstrumented_modules=1 \
suppressions=$root/tools/tsan.supp"
cd "$build"
# Left out here: CheckpointResume.SaveBehindABusyWriterIsSkippedAndSaysSo needs a writer slowed (1 s)
# past two steps; under TSan a step of its model takes longer than that, so the situation it tests
# never arises (the two-buffer code still runs, race-checked, in the other CheckpointResume tests).
ctest --output-on-failure --timeout 1200 -R "${MEGASCALE_TSAN_TESTS:-Comm|RankGrid|RankLayout|DpBuckets|DpLayout|DpEquivalence|TpEquivalence|PpEquivalence|CheckpointResume}" \
  -E "SaveBehindABusyWriterIsSkippedAndSaysSo" "$@"
