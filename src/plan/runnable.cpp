// runnable.cpp: see runnable.h.
#include "plan/runnable.h"

#include <fmt/format.h>

#include "base/check.h"  // ms::Error

namespace ms::plan {

RecomputeKind recompute_kind(Recompute r) {
  switch (r) {
    case Recompute::kNone: return RecomputeKind::kNone;
    case Recompute::kSelective: return RecomputeKind::kSelective;
    case Recompute::kFull: return RecomputeKind::kFull;
  }
  return RecomputeKind::kNone;
}

Config trainer_config(const ModelConfig& m, const PlanLayout& l) {
  Config c;
  c.model = m;
  c.model.recompute = recompute_kind(l.recompute);
  if (c.model.full_recompute()) c.model.recompute_every = 1;
  c.data.train = "(planning)";
  c.train.batch_size = l.micro_batch;
  c.train.seq_len = l.seq;
  c.train.global_batch = l.global_batch;
  c.train.precision = l.precision;
  c.optim.name = l.lamb ? OptimizerKind::kLamb : OptimizerKind::kAdamW;
  ParallelConfig& p = c.parallel;
  p.tp = l.tp, p.pp = l.pp, p.dp = l.dp, p.virtual_stages = l.virtual_stages, p.schedule = l.schedule;
  p.sequence_parallel = l.sequence_parallel;
  p.tp_chunks = l.sequence_parallel && l.tp > 1 ? l.tp_chunks : 1;
  p.overlap = l.overlap_dp;
  p.pp_decoupled = l.overlap_pp;
  p.bucket_mb = static_cast<float>(l.bucket_mb);
  return c;
}

std::string trainer_refusal(const ModelConfig& m, const PlanLayout& l) {
  try {
    Config c = trainer_config(m, l);
    c.resolve_layout(l.tp * l.pp * l.dp);  // validate(), then the world and batch products
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::string trainer_overrides(const PlanLayout& l) {
  return fmt::format("--parallel.tp={} --parallel.pp={} --parallel.dp={} --parallel.schedule={} "
                     "--parallel.virtual_stages={} --parallel.sequence_parallel={} --train.batch_size={} "
                     "--train.global_batch={} --train.seq_len={} --train.precision={} --model.recompute={}",
                     l.tp, l.pp, l.dp, config_name(l.schedule), l.virtual_stages, l.sequence_parallel ? "true" : "false",
                     l.micro_batch, l.global_batch, l.seq, config_name(l.precision),
                     config_name(recompute_kind(l.recompute)));
}

}  // namespace ms::plan
