// layout_search: the best layouts for a model, a batch and a device count (planner.md §4.6). It
// enumerates what the trainer runs — every candidate passes the trainer's own validation
// (runnable.h: key/value heads, MLP width, vocabulary, sequence...) — t dividing the heads and at most a node's
// devices; p dividing the layers; v dividing the layers per stage (interleaved, m a multiple of p,
// when v > 1); d = devices / (t p); micro-batch b with the global batch a multiple of d b;
// recomputation none < selective < full — keeping the fields the caller fixed (> 0 / set in
// `fixed`), prunes what does not fit in memory by the closed form, predicts the rest
// (step_model.h) and ranks by step time (ties: smaller t, p, v, then larger b, then less
// recomputation). Deterministic; re-planning a returned layout gives the same time.
#pragma once
#include <vector>

#include "plan/step_model.h"

namespace ms::plan {

struct SearchSpace {
  int gpus = 0;
  PlanLayout fixed;  // features (SP, zero, overlaps, kernels, dtype, optimizer, data) and global batch/seq
  int tp = 0, pp = 0, virtual_stages = 0, micro_batch = 0;  // 0: searched
  bool search_recompute = true;                             // else fixed.recompute
  std::vector<int> micro_batches = {1, 2, 4, 8};
};

struct SearchResult {
  std::vector<std::pair<PlanLayout, StepPrediction>> best;  // fastest first, at most `top`
  int candidates = 0, fitting = 0;
  int refused = 0;  // enumerated layouts the trainer's validation refuses (runnable.h), never proposed
};

// Throws when nothing fits (naming the largest term of the smallest candidate) or nothing is valid.
SearchResult search_layouts(const ModelConfig& m, const SearchSpace& s, const ClusterDesc& c, const PlanConstants& k,
                            int top = 1);

}  // namespace ms::plan
