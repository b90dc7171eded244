// config: the one configuration tree of megascale (ModelConfig, OptimConfig, DataConfig,
// TrainConfig). Every field is declared exactly once, with its default and its documentation, in
// the X-macro lists below; TOML loading, `--section.key=value` overrides, `--help`, the resolved
// config dump and validation are all generated from those lists, so they cannot drift apart.
// Guarantees: unknown keys, wrong types and impossible values are rejected by `validate()` /
// `load_config()` with an ms::Error naming the file (or "command line"), the key and the reason,
// before any work starts.
#pragma once
#include <string>
#include <vector>

namespace ms {

// X(type, name, default, doc)
#define MS_MODEL_FIELDS(X)                                                                        \
  X(int, vocab_size, 50257, "vocabulary size V of the tokenizer (GPT-2 BPE: 50257)")             \
  X(int, pad_vocab_to, 64, "the embedding/LM head is padded to Vp, a multiple of this (padded logits never enter the loss)") \
  X(int, n_layer, 6, "number of transformer blocks L")                                            \
  X(int, n_head, 6, "attention heads NH; must divide n_embd")                                     \
  X(int, n_embd, 384, "channels C (head size HS = C / NH)")                                       \
  X(int, max_seq_len, 1024, "maximum sequence length (rows of the learned position embedding)")   \
  X(std::string, block, "sequential", "transformer block: 'sequential' (GPT-2: x+Attn(LN1 x), then +MLP(LN2 .)) or 'parallel' (MegaScale/GPT-J: x + Attn(LN x) + MLP(LN x), one shared LN)") \
  X(std::string, attention, "full", "'full' causal attention or 'sliding' window attention")      \
  X(int, window, 256, "sliding window W: token t attends t-W+1..t (attention='sliding' only); must be > 0") \
  X(int, full_every, 0, "with attention='sliding': every k-th layer (layers k-1, 2k-1, ... counting from 0) uses full attention; 0 = none") \
  X(float, init_std, 0.02f, "std of the normal init of weights (residual projections get init_std/sqrt(2L), GPT-2 style)")

#define MS_OPTIM_FIELDS(X)                                                                        \
  X(std::string, name, "adamw", "optimizer: 'adamw' or 'lamb'")                                   \
  X(float, lr, 6e-4f, "peak learning rate")                                                       \
  X(float, min_lr, 6e-5f, "learning rate at the end of the cosine decay")                          \
  X(int, warmup_steps, 100, "linear warm-up steps (0 = none)")                                     \
  X(int, decay_steps, 0, "step at which the cosine decay reaches min_lr (0 = train.steps)")        \
  X(float, beta1, 0.9f, "Adam/LAMB first-moment decay")                                           \
  X(float, beta2, 0.95f, "Adam/LAMB second-moment decay")                                         \
  X(float, eps, 1e-8f, "Adam/LAMB epsilon")                                                       \
  X(float, weight_decay, 0.1f, "decoupled weight decay on matrix weights")                         \
  X(bool, decay_embeddings, false, "also apply weight decay to token/position embeddings")         \
  X(bool, decay_norm_and_bias, false, "also apply weight decay to LayerNorm parameters and biases") \
  X(float, max_trust, 0.0f, "LAMB: clamp the trust ratio to [0, max_trust]; 0 = no clamp")         \
  X(float, grad_clip, 1.0f, "clip the global gradient L2 norm to this value; 0 = off")

#define MS_DATA_FIELDS(X)                                                                          \
  X(std::string, train, "", "training shards: a file, a directory or a glob (llm.c .bin shards or Megatron .bin/.idx prefixes)") \
  X(std::string, val, "", "validation shards (same forms as data.train); empty = no validation")   \
  X(bool, shuffle, true, "shuffle training samples (order is a pure function of seed, epoch, index)") \
  X(std::string, tokenizer_dir, "", "folder with GPT-2's encoder.json and vocab.bpe (empty = the one setup installs)")

#define MS_TRAIN_FIELDS(X)                                                                         \
  X(int, steps, 1000, "optimizer steps to train")                                                 \
  X(int, batch_size, 8, "micro-batch size B (sequences per forward/backward)")                     \
  X(int, seq_len, 256, "sequence length T (<= model.max_seq_len)")                                \
  X(int, grad_accum, 1, "micro-batches accumulated per optimizer step (per data-parallel rank)")  \
  X(int, global_batch, 0, "sequences per optimizer step over all ranks (0 = batch_size * grad_accum * dp); when set, grad_accum = global_batch / (dp * batch_size)") \
  X(int, seed, 1337, "seed of weight init, data order and sampling")                               \
  X(int, eval_every, 100, "validation loss every N steps (0 = only at the end)")                   \
  X(int, eval_batches, 20, "micro-batches per validation")                                        \
  X(int, sample_tokens, 64, "tokens of text generated at the end (0 = none)")                      \
  X(std::string, out_dir, "runs/default", "run directory: log.jsonl, resolved config, final model") \
  X(int, threads, 0, "OpenMP threads (0 = all cores)")                                            \
  X(bool, pin_threads, true, "pin each OpenMP thread to its own CPU (ranks on one machine take disjoint CPUs)") \
  X(std::string, precision, "fp32", "GEMM precision: 'fp32', or 'bf16' (every linear layer's GEMMs take bf16 inputs with fp32 accumulation, on AMX when present; master weights, gradients, optimizer state, LayerNorm, attention, softmax and loss stay fp32)") \
  X(std::string, progress, "auto", "progress display: 'auto' (bar on a terminal), 'bar' or 'lines'")

// [parallel]: how ranks split the work. World size = tp * dp * pp (the launcher's WORLD_SIZE or
// mpirun's -np). Data parallelism is ZeRO-2: gradients reduce-scattered in buckets during backward,
// optimizer state and the update sharded, parameters all-gathered bucket by bucket.
#define MS_PARALLEL_FIELDS(X)                                                                      \
  X(int, dp, 0, "data-parallel ranks (0 = world size / (tp * pp))")                                \
  X(int, tp, 1, "tensor-parallel ranks (1 only, for now)")                                         \
  X(int, pp, 1, "pipeline-parallel ranks (1 only, for now)")                                       \
  X(std::string, order, "tp-dp-pp", "rank grid order, innermost first: a TP group is consecutive ranks") \
  X(std::string, backend, "auto", "collectives: 'auto' (mpi under mpirun/srun, gloo under megascale launch), 'gloo' or 'mpi'") \
  X(float, bucket_mb, 4.0f, "gradient bucket size in MiB (reduce-scatter / all-gather granularity)") \
  X(bool, overlap, true, "overlap reduce-scatters with backward and all-gathers with the next step (false: after backward / before forward, for comparison)") \
  X(float, timeout_s, 300.0f, "deadline of every collective and of rendezvous, seconds")            \
  X(bool, trace, false, "write a per-rank Chrome trace (out_dir/trace_rank<r>.json) of compute and communication")

#define MS_DECLARE_FIELD(type, name, def, doc) type name = def; /* doc */

struct ModelConfig { MS_MODEL_FIELDS(MS_DECLARE_FIELD)
  int padded_vocab() const { return (vocab_size + pad_vocab_to - 1) / pad_vocab_to * pad_vocab_to; }
  int head_size() const { return n_embd / n_head; }
  bool parallel_block() const { return block == "parallel"; }
  // Attention window of layer l: 0 = full causal.
  int layer_window(int l) const {
    if (attention != "sliding") return 0;
    if (full_every > 0 && (l + 1) % full_every == 0) return 0;
    return window;
  }
};
struct OptimConfig { MS_OPTIM_FIELDS(MS_DECLARE_FIELD) };
struct DataConfig { MS_DATA_FIELDS(MS_DECLARE_FIELD) };
struct TrainConfig { MS_TRAIN_FIELDS(MS_DECLARE_FIELD) };
struct ParallelConfig { MS_PARALLEL_FIELDS(MS_DECLARE_FIELD) };

struct Config {
  ModelConfig model;
  OptimConfig optim;
  DataConfig data;
  TrainConfig train;
  ParallelConfig parallel;

  // Rejects impossible values; the error names the key and the reason.
  void validate() const;
  // Fits the layout to world_size ranks, before any rank starts work: resolves parallel.dp = 0,
  // rejects tp * dp * pp != world_size, and derives train.grad_accum from train.global_batch
  // (which must be a multiple of dp * batch_size). Errors name the keys and the numbers.
  void resolve_layout(int world_size);
};

// One field of the tree, for help text and generic visitation.
struct FieldInfo {
  std::string key;    // "model.n_layer"
  std::string type;   // "int", "float", "bool", "string"
  std::string value;  // current value as text
  std::string doc;
};
std::vector<FieldInfo> list_fields(const Config& c);

// Sets one field from text ("--model.n_layer=4" style); errors name `where` and the key.
void set_field(Config& c, const std::string& key, const std::string& value, const std::string& where);

// Loads a TOML file over `c` (sections [model], [optim], [data], [train]); unknown keys and wrong
// types are errors naming the file and key.
void load_toml(Config& c, const std::string& path);

// The resolved config as TOML text (round-trips through load_toml) and as JSON text.
std::string to_toml(const Config& c);
std::string to_json(const Config& c);

}  // namespace ms
