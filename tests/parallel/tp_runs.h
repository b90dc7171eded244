// tp_runs: the configuration the tensor-parallel equivalence tests train (test_tp_equivalence,
// test_slow_tp_equivalence), chosen so the comparison is meaningful and cheap: 2 layers, 4 heads,
// C = 64, vocabulary 512 (padded 512: divisible by tp = 4), T = 64 with B = 2, so every rank holds
// at least 32 rows with tp <= 4 and each chunk of a chunked region at least 16 rows (below 16 rows
// oneDNN's sgemm picks other kernels, which changes the rounding, not the result); a learnable
// stream, 6 steps at lr 1e-2 (the single-process loss falls from 6.25 to ~5.8). The global batch
// (8 sequences) is the same for every layout: grad_accum 4 on one rank, 2 at dp = 2.
#pragma once
#include <memory>
#include <string>

#include "common/layout_runs.h"

namespace ms::testing {

inline const std::string kTpConfig = layout_config(64, 2, "window = 16\nfull_every = 2\n");

// Tolerances of a fp32 TP run against the single process (the bounds): per-step losses
// 1e-5 relative, final weights 3e-5 relative L2. The runs differ only in the association of fp32
// sums (row-parallel layers add tp partial sums of C/tp products; the vocabulary-parallel softmax
// adds tp partial exp sums; gradients of replicated tensors add tp partial row sums); Adam turns
// such rounding into differences of up to a few 1e-4 in single elements whose gradient is ~0, so
// no element-wise bound is asserted (the measured values are printed).
constexpr double kTpLossRel = 1e-5, kTpWeightRel = 3e-5;

// "--model.block=B --model.attention=A --optim.name=O" for one variant.
inline std::string tp_variant(const std::string& block, const std::string& attention, const std::string& optim) {
  return " --model.block=" + block + " --model.attention=" + attention + " --optim.name=" + optim;
}

}  // namespace ms::testing
