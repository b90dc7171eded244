// selfcheck: the diagnostics a host runs after a fault, before it may train again (MegaScale §4.3):
//  - GEMM check (one process): C = A @ B (fp32, through ms::sgemm; on a GPU through cuBLASLt in
//    true fp32) on seeded random matrices, sampled entries compared with a double-precision
//    reference; then GEMMs timed for GFLOP/s (reported only: the caller compares hosts).
//  - Collective check (every process of a group, on a world communicator): all-reduce sums of
//    known contributions (rank r gives r+1 in every element; the sum is N(N+1)/2) at a few sizes,
//    checked on every rank; then all-reduce algorithm bandwidth (bytes / time per op). On a GPU the
//    buffers are device memory (NCCL, or Gloo / MPI through pinned host staging).
// Guarantees: the collective verdict is agreed: after the sums, one all-gather shares every rank's
// (failed flag, contribution), so all members report the same allreduce_ok, the same failed and
// suspect ranks and the same bandwidth (the slowest rank's time). Every wait is bounded by the
// communicator's deadline: a dead peer is a CommError, never a hang.
// Fault injection, inert unless set: MEGASCALE_FAULT entry `selfcheck:host=H[:attempt=K|all]` makes
// the process whose MEGASCALE_HOST_INDEX is H contribute r+2 instead of r+1 (a machine that corrupts
// data) when MEGASCALE_RESTART_COUNT (unset: 0) is K (no attempt=: 0; all: always).
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/device.h"  // Device

namespace ms {

class Communicator;

// ---- GEMM ----

struct GemmCheckOptions {
  int m = 512, n = 512, k = 512;
  uint64_t seed = 20240601;
  int samples = 64;            // output entries compared with the reference
  double rtol = 1e-4;          // tolerance on the relative error (see compare_gemm_to_reference)
  double bench_seconds = 0.4;  // timing phase length (at least one GEMM is timed)
  Device device = Device::kCpu;  // kCuda: cuBLASLt on the current GPU
};

// C(m,n) = A(m,k) @ B(k,n), row-major; A and B uniform in [-1, 1).
struct GemmProblem {
  int m = 0, n = 0, k = 0;
  std::vector<float> a, b;
};
GemmProblem make_gemm_problem(int m, int n, int k, uint64_t seed);
// c (m*n floats) = p.a @ p.b through ms::sgemm (the kernels layer's oneDNN GEMM).
void run_gemm(const GemmProblem& p, float* c);

struct GemmComparison {
  bool ok = true;
  double max_rel_err = 0;  // over the sampled entries
  int worst_i = -1, worst_j = -1;
  double worst_got = 0, worst_expected = 0;
  std::string error;  // when !ok: the worst entry, got vs expected, and the tolerance
};
// Compares `samples` seeded random entries (i, j) of c with a double-precision triple loop. The
// relative error of an entry is |c_ij - ref_ij| / sum_k |a_ik * b_kj| (the scale of fp32 rounding in
// a dot product, so entries whose sum cancels to ~0 are judged fairly). A non-finite entry fails.
GemmComparison compare_gemm_to_reference(const GemmProblem& p, const float* c, int samples, double rtol,
                                         uint64_t seed);

struct GemmCheckResult {
  bool ok = false;
  double max_rel_err = 0;  // worst of the first product and the last timed one
  double gflops = 0;       // 2*m*n*k per GEMM over the timed phase
  int timed_gemms = 0;
  std::string error;
};
GemmCheckResult run_gemm_check(const GemmCheckOptions& opt);

// ---- Collective ----

struct CollectiveCheckOptions {
  std::vector<size_t> sizes = {1, 1024, 262144};  // floats per correctness all-reduce (4 B, 4 KiB, 1 MiB)
  size_t bench_bytes = 4u << 20;                  // bandwidth buffer
  int bench_iters = 8;                            // timed all-reduces (after one warm-up)
  bool inject_fault = false;                      // contribute r+2 instead of r+1 (MEGASCALE_FAULT selfcheck:host=H, obs/fault_injection.h)
  Device device = Device::kCpu;                   // kCuda: the all-reduced buffers are GPU memory
};

struct CollectiveCheckResult {
  bool ok = false;         // agreed: no member saw a wrong sum
  std::string error;       // when !ok: this rank's first wrong sum (size, element, got vs expected), else who saw one
  double gbps = 0;         // algorithm bandwidth: bench_bytes / (slowest rank's time per all-reduce) / 1e9;
                           // 0 (not measured) for a group of one
  std::vector<int> failed_ranks;   // members that saw a wrong sum
  std::vector<int> suspect_ranks;  // members whose contribution, as the others received it, was not r+1
  bool fault_injected = false;
};

// What is wrong with an all-reduce sum result of `count` floats over `world` ranks (each gave r+1):
// "" when every element is world*(world+1)/2, else a message naming the size, the first wrong
// element, got vs expected.
std::string check_allreduce_sum(const float* got, size_t count, int world);

// Runs the collective check on `comm` (called by every member, same options). Throws CommError on
// a communication failure (timeout, dead peer).
CollectiveCheckResult run_collective_check(Communicator& comm, const CollectiveCheckOptions& opt);


// ---- Report ----

// One process's result. Checks not asked for stay empty (null in JSON); a check asked for that an
// error stopped has no result either but reads as failed (ok false, its error = `error`).
struct SelfCheckReport {
  int rank = 0, world = 1, host_index = -1;
  bool gemm_requested = false, collective_requested = false;
  std::optional<GemmCheckResult> gemm;
  std::optional<CollectiveCheckResult> collective;
  std::string error;  // an error that stopped the checks (rendezvous, timeout), "" when none
  double seconds = 0;
  // Every check run passed and no error.
  bool ok() const;
};

// One line of JSON: rank, world, host_index, gemm_ok, gemm_max_rel_err, gemm_gflops, gemm_error,
// allreduce_ok, allreduce_error, allreduce_gbps, allreduce_failed_ranks, allreduce_suspect_ranks,
// fault_injected, error, seconds, ok. Fields of checks not asked for are null; a check asked for
// has a boolean *_ok, and a string *_error whenever *_ok is false (null otherwise); the measures
// (errors, gflops, gbps, ranks) are null when an error stopped the check.
std::string selfcheck_report_json(const SelfCheckReport& r);

}  // namespace ms
