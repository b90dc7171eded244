// pp_runs: the configuration the pipeline-parallel equivalence tests train (test_pp_equivalence,
// test_slow_pp_equivalence): the tensor-parallel suite's model and data (tp_runs.h) with 8 layers,
// so every layout up to pp = 4 with 2 virtual stages cuts them evenly (8 = 4 x 2 chunks of one
// layer); global batch 8 sequences of 64 tokens in micro-batches of 2: 4 micro-batches per step on
// one data-parallel rank, 2 at dp = 2 (a multiple of pp = 2, as interleaving needs).
#pragma once
#include <string>

#include "common/layout_runs.h"
#include "parallel/tp_runs.h"

namespace ms::testing {

inline std::string pp_config() {
  std::string c = kTpConfig;
  c.replace(c.find("n_layer = 2"), 11, "n_layer = 8");
  return c;
}

// The bounds, as for tensor parallelism (tp_runs.h): per-step losses 1e-5 relative, final
// weights 3e-5 relative L2. With the pipeline alone the runs differ only where fp32 sums associate
// differently: the tied embedding's two gradient copies are added once per step instead of per
// micro-batch, and the gradient norm adds per-stage sums.
constexpr double kPpLossRel = 1e-5, kPpWeightRel = 3e-5;

// "--parallel.pp=P --parallel.schedule=S --parallel.virtual_stages=V" (+ tp, dp).
inline std::string pp_layout(int dp, int tp, int pp, bool interleaved) {
  return " --parallel.pp=" + std::to_string(pp) + " --parallel.tp=" + std::to_string(tp) + " --parallel.dp=" +
         std::to_string(dp) + (interleaved ? " --parallel.schedule=interleaved --parallel.virtual_stages=2" : "");
}

}  // namespace ms::testing
