// host_memory: a CPU rank's peak memory as the trainer allocates it (planner.md §4.5's CPU line),
// for the pipeline stage that holds the most:
//  - each model chunk of the stage: what GPT::planned_footprint says a GPT of the run's micro-batch,
//    sequence, precision, tensor-parallel part, layer range and activation slots
//    (parallel/pp/pipeline_stage.h activation_slots_needed) allocates: fp32 parameters and
//    gradients, their bf16 copy in bf16 runs, the activations with the logits;
//  - the optimizer's moments (and LAMB's update buffer) over the rank's share: the whole chunk
//    without data parallelism, ZeRO-2's shard with it, plus the shard's parameters and gradients and
//    a padded bucket's staging;
//  - the checkpointer's snapshot buffer (ckpt/checkpointer: the parameters and both moments the
//    rank owns) when the run saves checkpoints: it is mapped at start but resident only once a save
//    writes it (base/aligned_buffer: buffers of 1 MiB and more are anonymous mappings, never cleared);
//  - the process floor the host file measured (libraries, threads, the loader; a Gloo rank's when
//    there are several ranks);
//  - the end of the run, whose buffers add to the rest: the whole model gathered on the first
//    replica when tp or pp split it, and rank 0's copy of it for the Hugging Face export.
// Not counted: a second snapshot buffer (only when a save queues behind another) and allocator slack.
#pragma once
#include "config/model_config.h"  // ModelConfig
#include "plan/memory_model.h"    // MemoryEstimate
#include "plan/step_model.h"      // PlanLayout

namespace ms::plan {

MemoryEstimate host_memory(const ModelConfig& m, const PlanLayout& l, const ClusterDesc& c);

}  // namespace ms::plan
