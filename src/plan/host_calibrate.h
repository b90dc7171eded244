// host_calibrate: the compute half of `megascale plan --calibrate-host` (planner.md §6): measures
// this CPU's kernels, the very ones the trainer runs (kernels/backend.h cpu_kernels(), optim/), and
// fills the tables of host_desc.h:
//  - for each thread count t measured (1, 2, 4, ... up to the cores, and the cores), cores / t
//    copies run AT ONCE on their own std::threads with t OpenMP threads each, as cores / t ranks
//    of t threads would: the rate of a copy is what a rank gets while the host's other ranks work
//    (shared memory bandwidth and clocks included);
//  - a linear layer's GEMMs on the grid M, N, K in gemm_dims: forward (out = X W^T) and backward
//    (dX = dY W, dW = dY^T X), fp32 and, where the trainer runs bf16 GEMMs, bf16 (operands
//    converted as the trainer does);
//  - attention forward and backward (head dimension 64, causal, fp32 and bf16 tiles) at each
//    sequence length, rows B x s >= 4096;
//  - LayerNorm, bias-GeLU, fused cross-entropy and a triad in the planner's byte accounting;
//  - AdamW and LAMB with the gradient's sum of squares, per parameter.
// Each number is the median of timed repetitions (each of enough calls to last ~5 ms) after a warm-up. The collectives ([comm]) are
// measured by the app (`megascale bench comm`'s workers).
#pragma once
#include <string>
#include <vector>

#include "plan/host_desc.h"  // HostTables

namespace ms::plan {

struct CalibrateOptions {
  int cores = 0;                                          // 0: omp_get_num_procs()
  std::vector<double> gemm_dims = {64, 256, 1024, 4096};  // M, N and K
  std::vector<double> attention_seq = {128, 512, 2048};
  int repeats = 5;   // timed repetitions per number (median)
  bool bf16 = true;  // also bf16 tables (where the CPU has bf16 GEMMs)
};

// The compute tables of this host (comm left empty). Prints nothing; takes seconds to a minute.
HostTables measure_host_compute(const CalibrateOptions& o);

}  // namespace ms::plan
