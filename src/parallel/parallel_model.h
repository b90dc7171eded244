// parallel_model: one rank's part of the model, parallelized from outside (torchtitan's
// `parallelize`): its model chunks (pipeline stage: parallel.virtual_stages of them; one chunk
// holding the whole model when pp == 1), each with its tensor-parallel part (tp/tensor_parallel.h)
// and its ParamState (param_state.h: ZeRO-2 over the data-parallel group, or local), and the
// pipeline stage that runs them (pp/pipeline_stage.h). The tied token embedding's two copies (first
// and last stage) start equal (broadcast over the embedding group) and get the sum of their
// gradients before anything reads them.
// It answers the whole-model questions: the step's phases over every chunk (micro-batches, gradient
// completion, global norm, update), sums over every axis in rank order (loss, norm: identical on
// every rank), the state a checkpoint saves and restores, the whole model for export, and one
// description for the log. train/trainer.h does the step's arithmetic on top; nothing above this
// layer branches on a parallel axis.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "comm/communicator.h"      // StreamOrder
#include "config/config.h"         // Config
#include "model/gpt.h"             // GPT
#include "parallel/param_state.h"  // ParamState, StateRun

namespace ms {

class Communicator;
class PipelineStage;
class RankOrderSum;
class TensorParallel;

// Seconds of one step's waits and compute, summed over this rank's chunks.
struct StepTimings {
  double dp_exposed = 0;  // waited on the data-parallel group (incl. the tied embedding's sum)
  double tp_exposed = 0;  // waited on the tensor-parallel group
  double pp_wait = 0;     // waited on pipeline sends / receives
  double compute = 0;     // forward + backward computation
};

class ParallelModel {
 public:
  // dp, tp, pp: this rank's groups (nullptr or size 1: that axis is absent); embedding: stages 0 and
  // pp-1 of the pipeline (RankGrid::embedding(); nullptr on other stages). init_weights = false: the
  // weights are left unset for a checkpoint restore that follows (every rank of the job passes the
  // same value; init_weights_now() must run if no restore came). Collective over the embedding group.
  ParallelModel(const Config& cfg, Communicator* dp, Communicator* tp, Communicator* pp, Communicator* embedding,
                bool init_weights = true);
  ~ParallelModel();
  // The fresh start's weights (train.seed), exactly as the constructor's init.
  void init_weights_now();
  // Every chunk's part of a Hugging Face folder's weights (model/hf_import.h), then the optimizer
  // state reset from them (a fresh optimizer). Every rank reads the tensors it holds; no collective.
  void import_hf_now(const std::string& dir);

  // --- the step's phases, over every chunk ---
  using Tokens = std::function<void(int* inputs, int* targets)>;
  // Every forward and backward of the step's micro-batches (parallel.schedule), each row's loss
  // scaled by dloss; returns this rank's loss sum over micro-batches (last stage; 0 elsewhere).
  double run_micro_batches(float dloss, const Tokens& next_micro_batch);
  // The gradients summed over replicas and the tied embedding's copies.
  void finish_grad_reduce();
  // A loss summed over the data-parallel replicas, then the pipeline (rank order: identical everywhere).
  double sum_loss(double local);
  // Makes every gradient this rank updates NaN (a non-finite loss known to this rank).
  void poison_grads();
  // Sequence parallelism: the partial gradients summed over the TP group (no-op otherwise).
  void all_reduce_partial_grads();
  // The whole model's gradient sum of squares, identical on every rank.
  double grad_sq_sum();
  // One optimizer update of every chunk at lr, the gradient scaled by grad_scale.
  void update(float lr, float grad_scale);
  StepTimings step_timings() const;  // of the step just run
  // Forward only over `batches` micro-batches; the loss sum over the pipeline (every rank).
  double forward_only_loss_sum(int batches, const Tokens& next_micro_batch);

  // --- the whole model ---
  bool needs_tokens() const;  // this stage reads inputs or targets
  int num_chunks() const { return static_cast<int>(chunks_.size()); }
  GPT& chunk(int c) { return *chunks_[c].model; }
  const GPT& chunk(int c) const { return *chunks_[c].model; }
  ParamState& param_state(int c) { return *chunks_[c].state; }
  int pipeline_stage() const { return stage_; }
  const Config& config() const { return cfg_; }
  int data_parallel_size() const { return dp_size_; }
  int steps_taken() const { return chunks_[0].state->steps_taken(); }
  // Parameters complete on this rank (waits for in-flight all-gathers): before export or reading
  // chunk(c).params() directly.
  void sync_params();
  // The whole model's parameters (build_param_layout(cfg.model) order), assembled on the rank with
  // tp = pp = 0 of this data-parallel replica (empty elsewhere). Collective over the replica's TP and
  // PP groups; call sync_params() first.
  std::vector<float> gather_whole_model();
  // The flat-buffer ranges [lo, hi) of chunk c whose optimizer state data-parallel rank `rank` of
  // `replicas` owns (ZeRO-2's shards; a restore's reader sends each rank only its ranges).
  std::vector<std::pair<size_t, size_t>> owned_ranges(int c, int replicas, int rank) const;
  // The layout for the log: tensor / pipeline / data parallel parts ("" for one process).
  std::string describe() const;

  // --- checkpoints ---
  // The training state this rank owns: its pieces (or whole part) of every tensor of its chunks,
  // tensors replicated over the TP group on TP rank 0 only, so each element of the job's state
  // appears on exactly one rank (the tied embedding's head copy as its own tensor). Valid at a step
  // boundary, until the next update; no communication.
  std::vector<StateRun> state_runs();
  // Every tensor this rank's chunks hold, as its ParamState owns it (ZeRO pieces, the
  // tensor-parallel part, replicated tensors on every part): what this rank needs to restore itself
  // alone, but for the weights its data-parallel peers own (in-memory checkpoints). Pointers stay
  // valid for the run; the values at a step boundary, until the next update.
  std::vector<StateRun> own_state_runs();
  // Restore: chunk c's parameters and moments as whole buffers of the chunk's layout
  // (chunk(c).param_specs() offsets), every tensor filled; and the steps already taken. Every chunk
  // is loaded before the next step.
  void load_chunk_state(int c, const float* params, const float* m, const float* v, int steps_taken);
  // Restore from own_state_runs() packed run after run (weights, moment 1, moment 2 of each);
  // `floats` is the packed length, checked. Every rank of the data-parallel group calls it at once.
  // `peers`: the other data-parallel replicas' own packed runs, when this rank can read them (a copy
  // on its host): given for every other replica, their weights are copied in and the weights'
  // all-gather is skipped; the whole group must then give them (else none gives any).
  struct PeerRuns {
    int replica = 0;  // its data-parallel rank
    const float* packed = nullptr;
    size_t floats = 0;
  };
  void load_own_runs(const float* packed, size_t floats, int steps_taken, const std::vector<PeerRuns>& peers = {});

 private:
  struct Chunk {
    std::unique_ptr<GPT> model;
    std::unique_ptr<TensorParallel> tp;    // tensor parallel (model part + regions)
    std::unique_ptr<ParamState> state;     // ZeRO-2 or local
    std::vector<ParamTensor> partial_views;  // TP: gradient views summed over the group each step
    std::vector<char> counted;             // per tensor: counted in the global norm (empty: all)
    size_t tied = 0;                       // elements of the tied embedding copy at offset 0 (0: none to sync)
  };
  void build_chunk(Chunk& k, int c, Communicator* dp, Communicator* tp, bool init_weights, int slots);
  double pp_sum(double v);                       // rank-order sum over the pipeline group
  void sum_tied_grads(float* grads, size_t n, const StreamOrder& on);  // over the embedding group
  std::vector<float> gather_stage_tensors(std::vector<int>& held);  // this stage's tensors, whole

  Config cfg_;
  std::vector<Chunk> chunks_;
  std::unique_ptr<PipelineStage> stage_exec_;
  std::unique_ptr<RankOrderSum> pp_sum_;
  Communicator* pp_ = nullptr;
  Communicator* embedding_ = nullptr;
  Communicator* tp_comm_ = nullptr;
  int stage_ = 0;
  int dp_size_ = 1;
  double tied_s_ = 0;  // seconds waited on the tied-embedding gradient sum this step
};

}  // namespace ms
