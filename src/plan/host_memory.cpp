// host_memory.cpp: see host_memory.h.
#include "plan/host_memory.h"

#include <cmath>

#include "model/gpt.h"                   // GPT::planned_footprint
#include "model/param_layout.h"          // build_param_layout
#include "parallel/pp/pipeline_stage.h"  // activation_slots_needed
#include "parallel/pp/pp_schedule.h"
#include "plan/runnable.h"               // recompute_kind

namespace ms::plan {

MemoryEstimate host_memory(const ModelConfig& m, const PlanLayout& l, const ClusterDesc& c) {
  ScheduleSpec spec;
  spec.kind = l.schedule, spec.stages = l.pp, spec.virtual_stages = l.virtual_stages;
  spec.micro_batches = l.global_batch / (l.dp * l.micro_batch);
  const PipelineSchedule sch = build_schedule(spec);
  const int chunks = l.pp * l.virtual_stages, per = m.n_layer / chunks;
  const bool bf16 = l.precision == DType::kBF16;
  const double bucket = std::max(1.0, std::floor(l.bucket_mb * 1048576.0 / 4));  // elements
  MemoryEstimate best;
  for (int s = 0; s < l.pp; s++) {
    const std::vector<int> slots = l.pp > 1 ? activation_slots_needed(sch, s) : std::vector<int>(l.virtual_stages, 1);
    MemoryEstimate e;
    e.stage = s;
    for (int v = 0; v < l.virtual_stages; v++) {
      const int g = sch.global_chunk(s, v);
      ModelShard shard;
      shard.parts = l.tp, shard.seq_sharded = l.sequence_parallel && l.tp > 1;
      shard.layer_begin = g * per, shard.layer_end = (g + 1) * per;
      // The trainer's own rule for what it keeps (recomputation included: gpt_activations.h).
      ModelConfig mr = m;
      mr.recompute = recompute_kind(l.recompute);
      if (mr.full_recompute()) mr.recompute_every = 1;
      const GPT::Footprint f = GPT::planned_footprint(mr, l.micro_batch, l.seq, l.precision, shard, slots[v]);
      const double P = static_cast<double>(f.params);
      e.params += 4 * P + (bf16 ? 2 * P : 0);
      e.grads += 4.0 * f.grads;
      e.activations += 4.0 * f.activations;  // the logits are among them
      const double local = l.dp > 1 ? std::ceil(P / l.dp) : P;
      e.optimizer += 4 * local * (l.lamb ? 3 : 2);          // moments (and LAMB's update)
      if (l.dp > 1) e.optimizer += 8 * local + 8 * bucket;  // ZeRO-2's shard and its staging
      // The checkpointer's snapshot buffer (parameters and moments it owns): resident once a save wrote it.
      if (l.saves_checkpoints) e.other += 12 * local;
    }
    const int ranks = l.tp * l.pp * l.dp;
    e.other += (ranks > 1 ? c.host.rank_floor_mib : c.host.process_floor_mib) * 1048576.0;
    // The end of the run (train/run_finish): a split model is gathered whole on the first replica,
    // and rank 0 (stage 0) copies the whole model into the Hugging Face export.
    const double whole = 4.0 * static_cast<double>(build_param_layout(m).total);
    e.other += (l.tp > 1 || l.pp > 1 ? whole : 0) + (s == 0 ? whole : 0);
    if (s == 0 || e.total() > best.total()) best = e;
  }
  finish_estimate(best, c);
  return best;
}

}  // namespace ms::plan
