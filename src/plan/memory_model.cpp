// memory_model.cpp: see memory_model.h.
#include "plan/memory_model.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "base/check.h"

namespace ms::plan {

namespace {

void check_layout(const GptShape& m, const MemoryLayout& l) {
  MS_CHECK(l.tp >= 1 && l.pp >= 1 && l.dp >= 1 && l.virtual_stages >= 1 && l.micro_batch >= 1 && l.micro_batches >= 1,
           "plan: tp {}, pp {}, dp {}, virtual stages {}, micro-batch {}, micro-batches {}: each must be >= 1", l.tp,
           l.pp, l.dp, l.virtual_stages, l.micro_batch, l.micro_batches);
  MS_CHECK(m.layers % (l.pp * l.virtual_stages) == 0, "plan: {} layers do not split into pp {} x virtual stages {}",
           m.layers, l.pp, l.virtual_stages);
  MS_CHECK(m.heads % l.tp == 0, "plan: {} heads do not split over tp {}", m.heads, l.tp);
  MS_CHECK(l.zero >= 0 && l.zero <= 2, "plan: zero {} (0, 1 or 2)", l.zero);
  MS_CHECK(l.weight_bytes == 2 || l.weight_bytes == 4, "plan: weight bytes {} (2 or 4)", l.weight_bytes);
}

// Micro-batches whose activations stage 0 holds at its peak.
double in_flight(const MemoryLayout& l, int stage) {
  const double p = l.pp, m = l.micro_batches, v = l.virtual_stages;
  if (l.virtual_stages > 1) return p * (1.0 + (p - 1.0) / (p * v));
  return std::min(m, p - stage);
}

}  // namespace

double stage_params(const GptShape& m, const MemoryLayout& l, int stage) {
  check_layout(m, l);
  const double h = m.hidden, t = l.tp, V = m.vocab;
  const double layers = static_cast<double>(m.layers) / l.pp;
  double p = layers * ((12.0 * h * h + 7.0 * h) / t + 6.0 * h);
  const bool first = stage == 0, last = stage == l.pp - 1;
  if (first) p += V * h / t + static_cast<double>(m.seq) * h;
  if (last) p += (first ? 0.0 : V * h / t) + 2.0 * h;  // the tied head's copy, the final LayerNorm
  return p;
}

MemoryEstimate estimate_memory(const GptShape& m, const MemoryLayout& l, const ClusterDesc& c) {
  check_layout(m, l);
  const double layers = static_cast<double>(m.layers) / l.pp;
  const Recompute r = l.flash_attention && l.recompute == Recompute::kNone ? Recompute::kSelective : l.recompute;
  const double per_layer = layer_activation_bytes(m, l.micro_batch, l.tp, l.sequence_parallel, r);
  std::vector<MemoryEstimate> stages;
  for (int stage : {0, l.pp - 1}) {
    const double P = stage_params(m, l, stage), d = l.dp;
    MemoryEstimate e;
    e.stage = stage;
    e.params = l.weight_bytes * P;
    e.grads = l.zero >= 2 ? 4.0 * P / d + std::min(l.bucket_bytes, 4.0 * P) : 4.0 * P;
    const double opt = (l.weight_bytes == 4 ? 8.0 : 12.0) * P;
    e.optimizer = l.zero >= 1 ? opt / d : opt;
    e.activations = per_layer * layers * in_flight(l, stage);
    if (stage == l.pp - 1)
      e.activations += 6.0 * l.micro_batch * static_cast<double>(m.seq) * m.vocab / l.tp;  // fp32 logits + 16-bit grads
    const double rest = e.params + e.grads + e.optimizer + e.activations;
    e.other = (c.device.kind == "gpu" ? 3.0 * 1024 * 1024 * 1024 : 0.0) + 0.10 * rest;
    stages.push_back(e);
  }
  MemoryEstimate e = stages[0].total() >= stages[1].total() ? stages[0] : stages[1];
  finish_estimate(e, c);
  return e;
}

void finish_estimate(MemoryEstimate& e, const ClusterDesc& c) {
  const std::vector<std::pair<const char*, double>> terms = {{"params", e.params},
                                                             {"grads", e.grads},
                                                             {"optimizer", e.optimizer},
                                                             {"activations", e.activations},
                                                             {"other", e.other}};
  e.largest = std::max_element(terms.begin(), terms.end(), [](const auto& a, const auto& b) {
                return a.second < b.second;
              })->first;
  e.fits = e.total() <= c.device.memory_gib * 1024.0 * 1024.0 * 1024.0;
}

}  // namespace ms::plan
