// step_model: one training step of a layout on a cluster, predicted (planner.md §4): per pipeline
// chunk the forward and backward times of its operations (op_graph + op_cost; recomputation, of
// the transformer layers only, added to the backward), the tensor-parallel collectives priced on
// the node's links (comm_cost) and exposed by the overlap rules below, the pipeline timed over the runtime's schedule table
// (step_sim; the bubble is the simulated step with free transfers minus the busiest stage's
// compute, the exposed PP communication what real transfers add; a send carries 1/t of the
// activation with sequence parallelism or Megatron's scatter/gather), then ZeRO-2's reduce-scatter
// and all-gather on the NIC, the optimizer's memory-bound pass and the host's time per step.
// Overlap rules (one mechanism each, no free "hidden fraction"):
//  - TP none: every collective on the compute stream; tp-bwd: a backward collective beside the
//    weight-gradient GEMM next to it (exposed: what it exceeds); tp (MegaScale's chunked overlap,
//    K = tp_chunks): a collective next to an MLP GEMM exposes 1/K of itself plus what it exceeds
//    that GEMM, plus K - 1 more launches (the parallel block's one gather feeds QKV and FC1 fused,
//    MegaScale Fig. 3c: both GEMMs hide it); the sequential block's attention path keeps tp-bwd's rule;
//  - PP decoupled or paired send/recv (step_sim);
//  - DP: issued per model chunk (latency x chunks); with overlap, in the windows the simulated
//    schedule leaves (a chunk's reduce-scatter after its last backward on the stage, the next step's
//    all-gathers before each chunk's first forward; exposed: what runs past the pipeline or makes a
//    forward late), plus overlap_gamma x the hidden part (the compute beside it runs slower: the
//    collectives' kernels take SMs and memory bandwidth), all counted as dp_exposed; without, both
//    are exposed.
// Costs that grow with scale (scale_cost.h): the expected wait for the slowest of all devices
// (straggler_cv) and the data-parallel ring's contended bandwidth when it spans more hosts than one
// switch set holds (spine_eta, the network's oversubscription), each its own term of the split.
// MFU: eq. 7 model FLOPs (convention "megatron-72") over the precision's dense peak. PlanConstants'
// defaults are structural; a cluster's [efficiency] table sets calibrated ones (a100-80g's: fitted
// by bench/plan_fit_table5.py and bench/plan_fit_megascale.py, checked by test_plan_calibration).
// A CPU host (kind "cpu", comm_engine "cores") is priced from its measured tables instead
// (host_cost.h): every collective is CPU work on the compute timeline, so ZeRO-2's reduce-scatter
// (per bucket of bucket_mb) and all-gather, and the pipeline's sends, are exposed in full; all ranks
// share the one host.
#pragma once
#include "config/model_config.h"     // ModelConfig
#include "config/parallel_config.h"  // PipelineScheduleKind
#include "plan/cluster_desc.h"
#include "plan/comm_cost.h"  // Link
#include "plan/memory_model.h"
#include "plan/op_cost.h"    // DeviceEfficiency
#include "plan/host_cost.h"  // ChunkTimes
#include "plan/op_graph.h"   // AttentionImpl
#include "plan/step_sim.h"   // PipelineTimeline

namespace ms::plan {

struct PlanLayout {
  int tp = 1, pp = 1, dp = 1, virtual_stages = 1;
  int micro_batch = 1, global_batch = 1;  // sequences; micro-batches per replica m = G / (d b)
  int seq = 2048;
  PipelineScheduleKind schedule = PipelineScheduleKind::k1F1B;
  bool sequence_parallel = true;
  Recompute recompute = Recompute::kNone;
  int zero = 2;
  bool overlap_tp_bwd = true, overlap_tp = false, overlap_pp = true, overlap_dp = true;
  bool pp_scatter_gather = true;  // p2p sends 1/t of an activation per TP rank (Megatron's default; implied by SP)
  int tp_chunks = 4;
  AttentionImpl attention = AttentionImpl::kFlash;
  DType precision = DType::kBF16;
  bool lamb = false;
  bool data_async = true;
  // CPU hosts (cluster kind "cpu"): compute threads per rank (0: the host's cores / ranks, as the
  // trainer picks), the collectives' backend ("gloo" or "mpi") and ZeRO-2's bucket size.
  int threads = 0;
  std::string comm_backend = "gloo";
  double bucket_mb = 4;
  // The run saves checkpoints (checkpoint.every or train.exit_after): the checkpointer's snapshot
  // buffer is then written, and resident; otherwise it stays an untouched mapping.
  bool saves_checkpoints = true;
  // The gradients' dtype over data parallelism: fp32 (megascale's trainer; Megatron with bf16, or
  // with --accumulate-allreduce-grads-in-fp32), else the weights' (Megatron's fp16 default: its
  // DDP buffers take the parameters' dtype).
  bool grad_reduce_fp32 = true;
  int element_bytes() const { return precision == DType::kF32 ? 4 : 2; }  // weights and activations
  int grad_reduce_bytes() const { return grad_reduce_fp32 ? 4 : element_bytes(); }
};

struct PlanConstants {
  DeviceEfficiency device;
  double intra_eta = 0.8, nic_eta = 0.8;                        // links' large-message share of their spec
  double intra_half_bytes = 1 << 20, nic_half_bytes = 4 << 20;  // message size at half of it
  double optimizer_bytes_per_param = 32;                        // Adam's pass over the shard (LAMB: x 1.25)
  double host_sync_s = 0, host_async_s = 0;                     // host time per step on the critical path
  double overlap_gamma = 0;  // compute slowdown while an overlapped DP collective runs beside it (planner.md §4.4 γ)
  // Scale (scale_cost.h): a device's per-step compute spread (relative deviation; the slowest of
  // all devices paces the step), and the share of a link's bandwidth a flow keeps across the fat
  // tree's upper tiers (ECMP collisions) when a data-parallel ring spans more than one switch set.
  double straggler_cv = 0, spine_eta = 1.0;
};

// The planner's constants for a cluster: the defaults above, overridden by its [efficiency] table.
PlanConstants plan_constants(const ClusterDesc& c);

struct StepPrediction {
  double step_s = 0, tokens_per_s = 0, mfu = 0;
  // The split (sums to step_s): compute of the busiest stage, the recompute within it, exposed TP
  // within it, the bubble, exposed PP, DP, the optimizer, the host, the wait for the slowest device
  // (straggler) and what the data-parallel traffic loses above one switch set (spine).
  double compute = 0, recompute = 0, tp_exposed = 0, bubble = 0, pp_exposed = 0, dp_exposed = 0, optimizer = 0,
         other = 0, straggler = 0, spine = 0;
  MemoryEstimate memory;
  PipelineTimeline timeline;
};

// The memory model's view of a layout (micro-batches per replica m = G / (d b)).
MemoryLayout memory_layout_of(const PlanLayout& l);

// ZeRO-2 overlapped with the pipeline, per stage, with the windows the runtime's schedule leaves
// (planner.md §4.4): the NIC reduce-scatters chunk c's gradients from the start of the stage's last
// backward of chunk c (its buckets fill during it), one chunk at a time in that order (exposed: what
// runs past the pipeline's end); the next step's all-gathers run from the step's start, chunk by
// chunk in the order of their first forward, each done by the end of that forward (its later
// buckets are gathered while its first layers run; exposed: the largest lateness). With one stage
// and one chunk this is the bucketed rule: max(0, RS - last backward) + max(0, AG - first forward).
// The slowest stage counts.
double zero2_overlap_exposed(const PipelineTimeline& tl, int chunks, double rs_chunk, double ag_chunk);

// Throws naming the field for a layout the model or the batch cannot split.
StepPrediction predict_step(const ModelConfig& m, const PlanLayout& l, const ClusterDesc& c, const PlanConstants& k);

}  // namespace ms::plan
