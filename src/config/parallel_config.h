// parallel_config: the [parallel] section of the config tree: the layout of ranks and the collectives' engine.
// Fields are declared once, in the X-macro list below (X(type, name, default, doc)); config.h builds
// loading, overrides, help, the resolved dump and validation from it.
#pragma once
#include <string>

#include "config/config_enum.h"  // MS_CONFIG_ENUM, MS_DECLARE_FIELD

namespace ms {

// parallel.backend: the collectives' engine.
enum class BackendChoice : uint8_t { kAuto, kGloo, kMpi, kNccl };
MS_CONFIG_ENUM(BackendChoice, {BackendChoice::kAuto, "auto"}, {BackendChoice::kGloo, "gloo"}, {BackendChoice::kMpi, "mpi"},
               {BackendChoice::kNccl, "nccl"})

// parallel.schedule: the pipeline schedule (parallel/pp/pp_schedule.h builds its tables).
enum class PipelineScheduleKind : uint8_t { k1F1B, kInterleaved };
MS_CONFIG_ENUM(PipelineScheduleKind, {PipelineScheduleKind::k1F1B, "1f1b"}, {PipelineScheduleKind::kInterleaved, "interleaved"})

// [parallel]: how ranks split the work. World size = tp * dp * pp (the launcher's WORLD_SIZE or
// mpirun's -np). Tensor parallelism (parallel/tp/) shards every layer over tp ranks, with sequence
// parallelism and chunked communication overlap. Data parallelism is ZeRO-2: gradients reduce-scattered in buckets during backward,
// optimizer state and the update sharded, parameters all-gathered bucket by bucket.
#define MS_PARALLEL_FIELDS(X)                                                                      \
  X(int, dp, 0, "data-parallel ranks (0 = world size / (tp * pp))")                                \
  X(int, tp, 1, "tensor-parallel ranks: heads, the MLP width 4C and the padded vocabulary are split over them (Megatron column/row-parallel layers, vocabulary-parallel embedding and cross-entropy); must divide n_head, 4*n_embd and the padded vocabulary") \
  X(bool, sequence_parallel, true, "with tp > 1: LayerNorm, residual adds and the position embedding run on seq_len/tp of the rows per rank; an all-gather enters and a reduce-scatter leaves each tensor-parallel region (false: all-reduce, every rank holds all rows)") \
  X(int, tp_chunks, 1, "with sequence_parallel: each tensor-parallel region's all-gather / reduce-scatter (fused with the GEMM that consumes or produces its rows: the MLP's, QKV, the projections, the LM head) is cut into this many chunks, pipelined with the GEMM on the neighbouring chunk (MegaScale Fig. 3c); 1 = no overlap (the default: on two shared cores chunking only adds cost, docs/performance.md); at most seq_len*batch_size/tp") \
  X(int, pp, 1, "pipeline-parallel stages: the layers are cut into pp*virtual_stages chunks of equal size (embedding with the first, final LayerNorm + LM head + loss with the last; the tied embedding's two copies get their gradients summed); micro-batches = train.grad_accum") \
  X(PipelineScheduleKind, schedule, PipelineScheduleKind::k1F1B, "pipeline schedule: '1f1b' (Megatron's one-forward-one-backward) or 'interleaved' (virtual_stages chunks per stage; train.grad_accum must be a multiple of pp)") \
  X(bool, pp_decoupled, true, "pipeline sends are waited on only when their buffer is reused (MegaScale's decoupled send/recv); false: paired, each send is waited on together with the receive of the next computation, before it starts (Megatron's combined send/recv, for comparison)") \
  X(int, virtual_stages, 1, "model chunks per pipeline stage (interleaved schedule: stage s holds chunks s, s+pp, ...); n_layer must be divisible by pp*virtual_stages") \
  X(std::string, order, "tp-dp-pp", "rank grid order, innermost first: a TP group is consecutive ranks") \
  X(BackendChoice, backend, BackendChoice::kAuto, "collectives: 'auto' (with train.device='cuda', NCCL built and pp = 1: nccl; else mpi under mpirun/srun, gloo under megascale launch), 'gloo', 'mpi' (both carry GPU buffers through pinned host staging, so several processes may share one GPU) or 'nccl' (GPU buffers on NCCL streams, one process per GPU; needs train.device='cuda' and pp = 1: the pipeline's concurrent send/recv would need grouped NCCL calls)") \
  X(float, bucket_mb, 4.0f, "gradient bucket size in MiB (reduce-scatter / all-gather granularity)") \
  X(bool, overlap, true, "overlap reduce-scatters with backward and all-gathers with the next step (false: after backward / before forward, for comparison)") \
  X(float, timeout_s, 300.0f, "deadline of every collective and of rendezvous, seconds")

struct ParallelConfig {
  MS_PARALLEL_FIELDS(MS_DECLARE_FIELD)
  // Checks the fields of this section alone; Config::validate() runs it, then the cross-section checks.
  void validate() const;
};

}  // namespace ms
