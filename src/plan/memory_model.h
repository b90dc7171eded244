// memory_model: the memory one device needs for a layout (planner.md §4.5), on the first and on the
// last pipeline stage, whichever is larger:
//  - parameters: the working copy, w bytes each (2 for bf16/fp16, 4 for fp32), of the stage's
//    layers ((12h^2 + 7h)/t sharded + 6h replicated per layer), plus the vocabulary-parallel token
//    embedding V h/t and the positions s h on the first stage, the tied head's copy V h/t and the
//    final LayerNorm 2h on the last (one copy when p = 1);
//  - gradients: fp32, 4 bytes per parameter; ZeRO-2 keeps 1/d of them plus the buckets in flight;
//  - optimizer: fp32 master weights (when the working copy is not fp32) and two moments, divided by
//    d with ZeRO >= 1;
//  - activations: layer_activation_bytes (FlashAttention saves no s x s scores: as selective
//    recomputation) x the stage's layers x the micro-batches in flight (stage 0,
//    1F1B: min(m, p); interleaved: p (1 + (p-1)/(p v))); the last stage adds its logits
//    (b s V/t, fp32, and their 16-bit gradient);
//  - other: on a GPU 3 GiB (context, NCCL buffers) plus 10% of the rest for allocator
//    fragmentation (planner.md: 2-4 GiB plus about 10%); on a CPU host 10% of the rest.
// fits = total <= the device's memory; when it does not, `largest` names the biggest term.
#pragma once
#include <string>

#include "plan/cluster_desc.h"  // ClusterDesc
#include "plan/model_math.h"    // GptShape, Recompute

namespace ms::plan {

struct MemoryLayout {
  int tp = 1, pp = 1, dp = 1, virtual_stages = 1;
  int micro_batch = 1;    // b, sequences
  int micro_batches = 1;  // m per step per replica
  bool sequence_parallel = false;
  Recompute recompute = Recompute::kNone;
  bool flash_attention = false;                  // no s x s scores saved (as selective recomputation)
  int zero = 2;                                  // 0, 1 or 2
  int weight_bytes = 2;                          // the working copy: 2 (bf16, fp16) or 4 (fp32)
  double bucket_bytes = 2 * 25.0 * 1024 * 1024;  // ZeRO-2 gradient buckets in flight
};

struct MemoryEstimate {
  double params = 0, grads = 0, optimizer = 0, activations = 0, other = 0;  // bytes per device
  double total() const { return params + grads + optimizer + activations + other; }
  int stage = 0;  // the pipeline stage the estimate is for (the larger of the first and last)
  bool fits = true;
  std::string largest;  // "params", "grads", "optimizer", "activations" or "other"
};

// Parameters held by one device of pipeline stage `stage` (0 <= stage < pp).
double stage_params(const GptShape& m, const MemoryLayout& l, int stage);
// Throws naming the field when the layout cannot split the model (pp not dividing the layers, ...).
MemoryEstimate estimate_memory(const GptShape& m, const MemoryLayout& l, const ClusterDesc& c);
// Sets `largest` and `fits` from the terms.
void finish_estimate(MemoryEstimate& e, const ClusterDesc& c);

}  // namespace ms::plan
