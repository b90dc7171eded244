// trainer: one rank's training step.
// A step = zero grads, grad_accum micro-batches of forward+backward (the loss of each row scaled
// by 1/(all rows of the step), so accumulation equals one big batch), global-norm clipping, one
// optimizer update at the scheduled learning rate. A non-finite gradient norm stops the run with
// an error before the update, so non-finite weights are never produced or exported.
// The micro-batches run as a pipeline schedule (parallel/pp/pipeline_stage.h) over this rank's
// model chunks: with pp == 1 one chunk holds the whole model and the schedule is F0 B0 F1 B1 ...
// With pp > 1 the chunks are this stage's (parallel.virtual_stages of them), the loss comes from
// the last stage and is the same on every rank, and the two copies of the tied token embedding
// (first and last stage) get the sum of their gradients, so they stay equal.
// The run around it (data, logging, validation, export, sampling) is wired by the application
// (apps/train_run.h); evaluation.h and sampling.h serve it.
#pragma once
#include <functional>  // std::function
#include <memory>
#include <string>

#include "config/config.h"        // Config
#include "model/gpt.h"           // GPT
#include "optim/lr_schedule.h"   // LrSchedule
#include "optim/optimizer.h"     // Optimizer

namespace ms {

class Communicator;
class PipelineStage;
class RankOrderSum;
class TensorParallel;
class ZeroDataParallel;

struct StepStats {
  int step = 0;            // 1-based index of the step just taken
  float loss = 0;          // mean training loss over the step's micro-batches
  float grad_norm = 0;     // global L2 norm before clipping
  float lr = 0;
  double seconds = 0;      // wall time of the step
  double comm_exposed_seconds = 0;  // data parallel: time the step waited on its communication
  double tp_exposed_seconds = 0;    // tensor parallel: time the step waited on the TP group
  double pp_wait_seconds = 0;       // pipeline: time the step waited on pipeline sends / receives
  double compute_seconds = 0;       // forward + backward computation of this rank's chunks
};

// Checkpoints: one contiguous run of one tensor's training state held by this rank.
struct StateRun {
  int chunk = 0;
  const ParamSpec* spec = nullptr;  // the chunk's tensor: this part's shape, its split, the whole shape
  bool head_copy = false;           // the last pipeline stage's copy of the tied token embedding
  size_t lo = 0, hi = 0;            // elements [lo, hi) of this rank's part of the tensor
  const float* param = nullptr;     // fp32 master weights, hi - lo elements
  const float* m = nullptr;         // optimizer first moment
  const float* v = nullptr;         // optimizer second moment
};

class Trainer {
 public:
  // dp: the data-parallel group (nullptr or size 1: one process holds everything). With dp, the
  // optimizer is ZeRO-2 sharded (zero_dp.h); cfg.train.grad_accum is per rank.
  // tp: the tensor-parallel group (nullptr or size 1: the whole model); with it the model holds
  // this rank's part (parallel/tp/tensor_parallel.h), and ZeRO shards that part over dp.
  // Compute spans go to the trace sink (obs/trace_sink.h) when its compute track is on.
  // pp: the pipeline group (group rank = stage); embedding: stages 0 and pp-1 of it
  // (RankGrid::embedding(); nullptr on other stages). cfg.train.grad_accum micro-batches per step.
  // init_weights = false: the weights are left unset for a checkpoint restore that follows (the
  // random init of a large model costs seconds per rank, all overwritten by load_chunk_state); every
  // rank of the job must pass the same value, and init_weights_now() must run if no restore came.
  explicit Trainer(const Config& cfg, Communicator* dp = nullptr, Communicator* tp = nullptr,
                   Communicator* pp = nullptr, Communicator* embedding = nullptr, bool init_weights = true);
  // The fresh start's weights (train.seed), exactly as the constructor's init: the tied embedding's
  // copies made equal, the ZeRO shards taken from them, the optimizer state zero. Collective over
  // the embedding group (pipeline) like the constructor.
  void init_weights_now();
  ~Trainer();

  // Micro-batch source: fills B*T ids each, in order. Called grad_accum times per step, only on
  // ranks whose stage uses tokens (needs_tokens()).
  using MicroBatches = std::function<void(int* inputs, int* targets)>;
  // One optimizer step.
  StepStats train_step(const MicroBatches& next_micro_batch);
  // Mean loss (forward only) over `batches` micro-batches of next_micro_batch, the same on every
  // rank; every rank of the job calls it.
  float eval_loss(int batches, const MicroBatches& next_micro_batch);
  bool needs_tokens() const;

  GPT& model() { return *chunks_[0].model; }  // chunk 0: the whole model when pp == 1
  int num_chunks() const { return static_cast<int>(chunks_.size()); }
  GPT& chunk(int c) { return *chunks_[c].model; }
  const Config& config() const { return cfg_; }
  int steps_taken() const;
  ZeroDataParallel* data_parallel() { return chunks_[0].zero.get(); }  // chunk 0's
  TensorParallel* tensor_parallel() { return chunks_[0].tp.get(); }  // chunk 0's
  int pipeline_stage() const { return stage_; }
  // Parameters complete on this rank (waits for in-flight all-gathers). Before export or reading
  // model().params() directly.
  void sync_params();
  // The whole model's parameters (build_param_layout(cfg.model) order), assembled on the rank with
  // tp = pp = 0 of this data-parallel replica (empty elsewhere). Every rank of the replica's TP and
  // PP groups calls it (collective); call sync_params() first.
  std::vector<float> gather_whole_model();

  // Checkpoints. The training state this rank owns: its ZeRO pieces (or whole part) of every tensor
  // of its chunks, tensors replicated over the TP group on TP rank 0 only, so each element of the
  // job's state appears on exactly one rank (the tied embedding's head copy as its own tensor).
  // Valid at a step boundary, until the next train_step; no communication.
  std::vector<StateRun> state_runs();
  // Restore: chunk c's parameters and moments as whole buffers of the chunk's layout
  // (chunk(c).param_specs() offsets), every tensor filled; and the steps already taken. Every
  // chunk is loaded before the next train_step.
  void load_chunk_state(int c, const float* params, const float* m, const float* v, int steps_taken);
  // Runs right before every optimizer update, the only place the state changes (a checkpoint's
  // stage-1 copy, made beside the step's forward and backward, finishes there).
  void set_before_update(std::function<void()> fn) { before_update_ = std::move(fn); }

 private:
  struct Chunk {
    std::unique_ptr<GPT> model;
    std::unique_ptr<TensorParallel> tp;        // tensor parallel (model part + regions)
    std::unique_ptr<Optimizer> optimizer;      // without data parallelism
    std::unique_ptr<ZeroDataParallel> zero;    // data parallel (sharded optimizer)
    std::vector<ParamTensor> partial_views;    // TP: gradient views summed over the group each step
    std::vector<char> counted;                 // per tensor: counted in the global norm (empty: all)
    bool grads_zeroed = false;  // the last optimizer step left the gradient buffer zero
    size_t tied = 0;            // elements of the tied embedding copy at offset 0 (0: none to sync)
  };
  double grad_sq_sum_whole();  // the whole model's gradient sum of squares, identical on every rank
  double pp_sum(double v);     // rank-order sum over the pipeline group (identity without one)
  void sum_tied_grads(float* grads, size_t n);  // over the embedding group

  Config cfg_;
  std::vector<Chunk> chunks_;
  std::unique_ptr<PipelineStage> stage_exec_;
  std::unique_ptr<RankOrderSum> pp_sum_;
  Communicator* pp_ = nullptr;
  Communicator* embedding_ = nullptr;
  Communicator* tp_comm_ = nullptr;
  int stage_ = 0;
  LrSchedule schedule_;
  int dp_size_ = 1;
  double tied_s_ = 0;  // seconds waited on the tied-embedding gradient sum this step
  std::function<void()> before_update_;
};

}  // namespace ms
