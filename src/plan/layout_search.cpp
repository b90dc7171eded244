// layout_search.cpp: see layout_search.h.
#include "plan/layout_search.h"

#include <algorithm>
#include <tuple>

#include "base/check.h"
#include "plan/runnable.h"  // trainer_refusal

namespace ms::plan {

namespace {

std::vector<int> divisors(int n) {
  std::vector<int> d;
  for (int i = 1; i <= n; i++)
    if (n % i == 0) d.push_back(i);
  return d;
}

// Rank key: time first, then the deterministic tie-break of the header.
auto rank_key(const PlanLayout& l, double step) {
  return std::make_tuple(step, l.tp, l.pp, l.virtual_stages, -l.micro_batch, static_cast<int>(l.recompute));
}

}  // namespace

SearchResult search_layouts(const ModelConfig& m, const SearchSpace& s, const ClusterDesc& c, const PlanConstants& k,
                            int top) {
  MS_CHECK(s.gpus > 0 && top > 0, "plan: search over {} devices for the best {}", s.gpus, top);
  const GptShape shape = shape_of(m, s.fixed.seq);
  const std::vector<Recompute> recomputes =
      s.search_recompute ? std::vector<Recompute>{Recompute::kNone, Recompute::kSelective, Recompute::kFull}
                         : std::vector<Recompute>{s.fixed.recompute};
  SearchResult r;
  double smallest = -1;
  std::string smallest_term;
  for (int t : divisors(m.n_head)) {
    if ((s.tp && t != s.tp) || (!s.tp && t > c.node.devices_per_node) || s.gpus % t) continue;
    for (int p : divisors(m.n_layer)) {
      if ((s.pp && p != s.pp) || s.gpus % (t * p)) continue;
      const int d = s.gpus / (t * p);
      for (int v : divisors(m.n_layer / p)) {
        if ((s.virtual_stages && v != s.virtual_stages) || (v > 1 && p == 1)) continue;
        for (int b : s.micro_batches) {
          if ((s.micro_batch && b != s.micro_batch) || s.fixed.global_batch % (d * b)) continue;
          const int mb = s.fixed.global_batch / (d * b);
          if (v > 1 && mb % p) continue;
          for (Recompute rc : recomputes) {
            PlanLayout l = s.fixed;
            l.tp = t, l.pp = p, l.dp = d, l.virtual_stages = v, l.micro_batch = b, l.recompute = rc;
            l.schedule = v > 1 ? PipelineScheduleKind::kInterleaved : PipelineScheduleKind::k1F1B;
            if (!trainer_refusal(m, l).empty()) {  // only what `megascale train` runs
              r.refused++;
              continue;
            }
            r.candidates++;
            const MemoryEstimate mem = estimate_memory(shape, memory_layout_of(l), c);
            if (!mem.fits) {
              if (smallest < 0 || mem.total() < smallest) smallest = mem.total(), smallest_term = mem.largest;
              continue;
            }
            r.fitting++;
            StepPrediction pred = predict_step(m, l, c, k);
            r.best.emplace_back(l, std::move(pred));
            std::sort(r.best.begin(), r.best.end(), [](const auto& x, const auto& y) {
              return rank_key(x.first, x.second.step_s) < rank_key(y.first, y.second.step_s);
            });
            if (static_cast<int>(r.best.size()) > top) r.best.pop_back();
          }
        }
      }
    }
  }
  MS_CHECK(r.candidates > 0, "plan: no layout of {} devices splits this model and batch {} that the trainer runs "
           "(heads {}, key/value heads {}, layers {}; {} layouts refused by its validation)", s.gpus,
           s.fixed.global_batch, m.n_head, m.kv_heads(), m.n_layer, r.refused);
  MS_CHECK(r.fitting > 0, "plan: none of the {} layouts fits in {} GiB; the smallest needs {:.1f} GiB, most of it {}",
           r.candidates, c.device.memory_gib, smallest / (1024.0 * 1024.0 * 1024.0), smallest_term);
  return r;
}

}  // namespace ms::plan
