// gpt: the decoder (GPT-2 and Llama-style), forward and backward written by hand per layer (llm.c
// style), with every parameter, gradient and activation in explicit flat buffers. It knows nothing
// of parallelism: distributed wrappers drive it from outside.
//
// Dimension letters used throughout (declared once, here):
//   B  batch size (sequences)        T  sequence length         N = B*T rows
//   C  channels (n_embd)             NH query heads             HS = C/NH head size
//   NKV key/value heads (NH/NKV query heads share one: grouped-query attention; NKV = NH: multi-head)
//   F  MLP hidden size (ffn())       FC = F (GeLU) or 2F (SwiGLU: gate and up) the MLP's first GEMM
//   L  layers                        V  vocabulary size         Vp = V padded to a multiple of 64
// Local shapes of a model cut into P tensor-parallel parts (ModelShard, param_layout.h):
//   NHl = NH/P query heads, Cl = C/P their channels, NKVl = NKV/P key/value heads, QKVl =
//   (NHl + 2 NKVl) HS the packed q|k|v width, Fl = F/P, FCl = FC/P, Vl = Vp/P vocabulary rows
//   (columns [v0, v0+Vl) of the logits); n = N/P residual-stream rows with sequence parallelism
//   (rows [index*n, (index+1)*n) of the B*T rows), else n = N. P = 1: every local shape is the
//   full one. The ranks meet only in the TensorRegions calls (tensor_regions.h): gather_rows into
//   and reduce_rows out of each tensor-parallel region (per block: one pair for the parallel block,
//   two for the sequential one; one each for the embedding and the LM head) and the two all-reduces
//   of the vocabulary-parallel cross-entropy. A row-parallel layer's bias is added by part 0 only.
//
// Block variants: sequential (GPT-2: h = x + Attn(LN1(x)); y = h + MLP(LN2(h))) and parallel
// (MegaScale: y = x + Attn(LN(x)) + MLP(LN(x)), one norm shared by both branches). The family's
// pieces (model_config.h) are independent: LayerNorm or RMSNorm ("LN" above), learned positions or
// RoPE (queries and keys rotated in qkv right after the QKV GEMM's rows, before attention; the
// gradient rotated back after attention's backward), GeLU or SwiGLU MLP, grouped-query attention,
// biases on all linear layers, none, or the QKV projection only, tied or untied LM head.
// Pipeline chunks (ModelShard::layer_begin/layer_end): a chunk without the embedding starts from an
// activation (n,C) the caller writes into input_buffer(slot); a chunk without the head ends with
// output() (n,C), and its backward starts from the gradient of that output. Several micro-batches
// may be in flight between their forward and backward: the model keeps `activation_slots` sets of
// saved activations and select_slot(k) picks the one the next forward / backward uses.
// Attention: full causal or sliding window (model.window, with full attention every
// model.full_every-th layer). With tie_embeddings the LM head is the token embedding; otherwise it
// is its own tensor (lm_head.weight, after the final norm), held by the chunk with the head only.
// Activation recomputation (model.recompute, gpt_activations.h): selective re-runs each block's
// attention forward in its backward; full re-runs the forward of each group of recompute_every
// blocks (with its tensor-parallel regions, never the param_wait hook) before the group's
// backward. Either gives the bits of no recomputation (every kernel is deterministic).
// Guarantees: padded vocabulary rows never enter the loss and get zero gradient; forward/backward
// are deterministic for a given thread count; no allocation after construction.
//
// DType::kBF16 (train.precision=bf16): every linear layer's GEMMs (qkv, attention projection,
// fc, fc projection, LM head; forward, input gradient and weight gradient) take bf16 operands
// with fp32 accumulation (gemm_bf16.h, AMX when present). Master weights, gradients (fp32
// buffers, accumulated in fp32), the norms, GeLU / SwiGLU, RoPE, softmax and the loss stay fp32; attention's
// tile products take bf16 operands too (attention_forward_bf16, AVX512-BF16), its softmax fp32. The
// bf16 weight copy is refreshed at most once per optimizer step, by this rule: any NON-CONST call
// of params() (the optimizer update, an import) or init_weights() marks the copy stale, and the
// next forward() converts all weights once; backward() uses the copy its forward used. Code that
// keeps the float* from params() and writes through it later must call refresh_bf16_weights().
// The bf16 copies of the GEMM inputs made in forward (ln1, atty, ln2, fch_gelu, lnf) are kept for
// backward, which never converts them again (recomputation re-makes them with the same bits).
// kFp32 runs exactly the fp32 code (bit for bit).
//
// Device (train.device): every parameter, gradient and activation lives on one device, and every
// computation runs through that device's KernelBackend (kernels/backend.h); the model itself has no
// loop over tensor data. Device::kCpu runs the CPU kernels exactly as before. Device::kCuda keeps
// the buffers in GPU memory: params(), grads(), logits(), losses(), input_buffer() and output() are
// then DEVICE pointers; host code reads and writes through copy_params_to_host / load_params /
// copy_grads_to_host / copy_logits_to_host. The host-side contract is unchanged: token ids and
// targets passed to forward() are host arrays, validated on the host before they are copied over,
// and forward() returns the mean loss on the host (one read-back of the per-row losses).
#pragma once
#include <cstdint>  // uint64_t
#include <functional>  // std::function
#include <string>
#include <utility>  // std::pair
#include <vector>

#include "base/bf16.h"           // bf16_t
#include "base/device_array.h"   // DeviceArray, Device
#include "base/dtype.h"              // DType
#include "config/model_config.h"   // ModelConfig
#include "model/bf16_weight_cache.h"  // Bf16WeightCache
#include "model/gpt_activations.h"    // ActSlot, ActScratch, BlockActs
#include "model/param_layout.h"    // ParamSpec, ParamKind, ModelShard
#include "model/tensor_regions.h"  // TensorRegions

namespace ms {

class KernelBackend;

// Pointers of one block's parameters (or gradients) into a flat buffer (local shapes); nullptr for
// a tensor the model does not have (biases, ln_2 of the parallel block, an RMSNorm's bias).
struct BlockParams {
  float *ln1_w, *ln1_b;              // (C)
  float *qkv_w, *qkv_b;              // (QKVl, C), (QKVl): q, k, v stacked
  float *attn_proj_w, *attn_proj_b;  // (C, Cl), (C)
  float *ln2_w, *ln2_b;              // (C); nullptr in the parallel block
  float *fc_w, *fc_b;                // (FCl, C), (FCl): SwiGLU's gate and up stacked
  float *fc_proj_w, *fc_proj_b;      // (C, Fl), (C)
};

class GPT {
 public:
  // Allocates parameters, gradients and activations for micro-batches up to maxB x maxT.
  // precision: DType::kF32 or DType::kBF16 (the GEMMs' operands). kBF16 prints a one-line notice when the CPU lacks AMX-BF16 (slower fallback).
  // shard: this process's part of a tensor-parallel model (default: the whole model); a model
  // with shard.parts > 1 needs set_tensor_regions() before its first forward.
  // activation_slots: saved-activation sets (micro-batches in flight between forward and backward).
  // device: where the tensors live and the kernels run (kCuda: throws a named error unless a GPU opens).
  GPT(const ModelConfig& cfg, int maxB, int maxT, DType precision = DType::kF32, const ModelShard& shard = {},
      int activation_slots = 1, Device device = Device::kCpu);
  Device device() const { return params_.device(); }
  KernelBackend& kernels() const { return *k_; }

  // The ranks' meeting points (tensor_regions.h); nullptr restores the one-rank identity. Not owned.
  void set_tensor_regions(TensorRegions* r) { regions_ = r ? r : &identity_regions_; }
  const ModelShard& shard() const { return shard_; }
  // Rows of the residual stream this part holds for a B x T batch (n above; depends only on B*T).
  int local_rows(int B, int T) const;
  int vocab_offset() const { return v0_; }   // v0: first logit column held here
  int local_vocab() const { return Vl_; }    // Vl: logit columns held here

  // Deterministic GPT-2-style initialisation (normal weights, residual projections scaled by
  // 1/sqrt(2L), norms one, biases zero): every tensor draws from its own stream seeded by
  // (seed, tensor index), over the whole tensor; a part keeps its slice, so the values do not
  // depend on how the model is split.
  void init_weights(uint64_t seed);

  // Runs the model on inputs (B,T). With targets (B,T) (ids < V, or -1 = ignored) it returns the
  // mean loss; otherwise returns 0 and only logits are computed. If dloss != 0 the fused
  // softmax+cross-entropy also writes dLoss/dlogits (scaled by dloss per row) in place of the
  // logits, ready for backward(); pass dloss = 1/(number of counted rows in the whole step).
  // A chunk without the embedding takes inputs == nullptr and reads input_buffer(slot); a chunk
  // without the head ignores targets, returns 0 and, if dloss != 0, is ready for backward.
  float forward(const int* inputs, const int* targets, int B, int T, float dloss = 0.0f);

  // Backpropagates the selected slot's last forward (which must have had dloss != 0); ACCUMULATES
  // into grads(). A chunk without the head takes dout, the gradient of output() (n,C); one without
  // the embedding leaves the gradient of its input in input_grad().
  void backward(const float* dout = nullptr);

  // Pipeline chunks: which saved-activation set the next forward/backward use (0 <= k < slots).
  void select_slot(int k);
  int activation_slots() const { return static_cast<int>(slots_.size()); }
  float* input_buffer(int k) { return slots_[k].encoded; }  // (n,C) the first block's input
  const float* output() const { return a_->blocks[L_ - 1].out; }  // (n,C) of the selected slot's forward
  const float* input_grad() const { return sc_.dres; }  // (n,C) after backward of a chunk without embedding
  bool has_embedding() const { return has_emb_; }
  bool has_head() const { return has_head_; }
  int first_layer() const { return l0_; }  // global index of local block 0
  int num_layers() const { return L_; }    // blocks held

  // Hooks for wrappers that overlap communication with compute (data parallelism); the model
  // itself knows nothing of them. Offsets are into params()/grads().
  // grad_ready(lo, hi): during backward(), the gradients of [lo, hi) are final for this backward.
  //   Ranges arrive in decreasing offset order (ln_f, block L-1, ..., block 0, embeddings) and
  //   cover every parameter exactly once per backward (defer_token_grad below: the token
  //   embedding's range comes first).
  // param_wait(lo, hi): during forward(), called before parameters [lo, hi) are first read, in
  //   increasing offset order (embeddings, block 0, ..., ln_f), covering every parameter once; in
  //   bf16 mode a stale weight copy is then refreshed range by range as they arrive.
  using RangeHook = std::function<void(size_t lo, size_t hi)>;
  void set_grad_ready_hook(RangeHook fn) { grad_ready_ = std::move(fn); }
  void set_param_wait_hook(RangeHook fn) { param_wait_ = std::move(fn); }
  // The LM head is the token embedding (model.tie_embeddings): the tensor a pipeline's first and last
  // stages both hold. Otherwise the head is lm_head.weight, after the final norm.
  bool tied_embedding() const { return cfg_.tie_embeddings; }
  // The tied token embedding split in two (a chunk with both the embedding and the head): with
  // defer_token_grad(), the NEXT backward() reports the token embedding's range
  // token_embedding_range() ready right after the LM head's backward, before every other range (its
  // gradient is then the head's part only, final for this backward), and leaves the lookup's part
  // out of grads(): row i of token_grad_rows() (N,C; N = token_grad_count()) belongs to token id
  // token_ids()[i] (ids outside [vocab_offset(), vocab_offset() + local_vocab()) belong to other
  // tensor-parallel parts). The caller adds those rows itself; they stay valid until the next
  // forward(). Applies once.
  void defer_token_grad();
  std::pair<size_t, size_t> token_embedding_range() const { return {wte_, wte_ + static_cast<size_t>(Vl_) * C_}; }
  const float* token_grad_rows() const { return token_grad_rows_; }
  int token_grad_count() const { return token_grad_rows_ ? a_->B * a_->T : 0; }
  const int* token_ids() const { return a_->inputs; }

  void zero_grad() { grads_.zero(); }

  const ModelConfig& config() const { return cfg_; }
  const std::vector<ParamSpec>& param_specs() const { return specs_; }
  // Non-const access marks the bf16 weight copy stale (see the header comment).
  float* params() { bf16_weights_.mark_stale(); return params_.data(); }
  const float* params() const { return params_.data(); }
  float* grads() { return grads_.data(); }
  const float* grads() const { return grads_.data(); }
  size_t num_params() const { return params_.size(); }
  const ParamSpec& spec(const std::string& name) const;
  // Host copies, for any device (checkpoints, export, sampling, tests): all num_params() elements.
  void copy_params_to_host(float* out) const { params_.download(out, params_.size()); }
  void copy_grads_to_host(float* out) const { grads_.download(out, grads_.size()); }
  // Writes the parameters from host memory (the bf16 weight copy goes stale).
  void load_params(const float* host);
  // Rows [row, row + rows) of the selected slot's logits (Vl columns each) into host memory.
  void copy_logits_to_host(int row, int rows, float* out) const;

  DType precision() const { return precision_; }
  // bf16 mode: converts the fp32 master weights into the bf16 copy now (forward() does it by
  // itself when the copy is stale). No-op in fp32 mode.
  void refresh_bf16_weights();
  // bf16 mode: the weight copy itself (same offsets as params()), for an optimizer that writes it
  // in its own pass; call mark_bf16_weights_fresh() afterwards. nullptr in fp32 mode.
  bf16_t* bf16_weight_copy() { return precision_ == DType::kBF16 ? bf16_weights_.data() : nullptr; }
  void mark_bf16_weights_fresh() { bf16_weights_.mark_fresh(); }

  // Logits (B,T,Vl) of the selected slot's last forward: columns [v0, v0+Vl) (all Vp when whole; valid only when
  // dloss was 0).
  const float* logits() const { return a_->logits; }
  // Per-row losses (B,T) of the selected slot's last forward (every row, on every part).
  const float* losses() const { return a_->losses; }

  // What this process holds, in elements (tests and the run log compare parts with the whole).
  struct Footprint {
    size_t params = 0, grads = 0, logits = 0, activations = 0;  // activations: fp32 + bf16 buffers, in fp32 elements
  };
  Footprint footprint() const;
  // The same, planned without building the model (the planner's memory of a CPU run): what a GPT of
  // these arguments would allocate. The constructor checks its own buffers against it.
  static Footprint planned_footprint(const ModelConfig& cfg, int maxB, int maxT, DType precision,
                                     const ModelShard& shard = {}, int activation_slots = 1);

  // Model FLOPs of one training token: model/flops.h.

 private:
  BlockParams block_params(float* base, int l) const;
  void assign_activations(int slots);
  // One linear layer in the configured precision (fp32: matmul.h; bf16: gemm_bf16.h), on rows
  // [lo, hi) of full-row buffers (out (.,OC), inp (.,C)). In bf16 mode inp16 is the bf16 copy of
  // inp, whose rows are written here first when convert is true.
  void linear_rows(float* out, const float* inp, bf16_t* inp16, bool convert, const float* weight,
                   const float* bias, int lo, int hi, int C, int OC, bool accumulate);
  // Input gradient rows [lo, hi): dinp (=, or += when accumulate) dout @ weight. bf16: dout16 is
  // dout's bf16 copy, rows converted here first when convert.
  void linear_data_grad_rows(float* dinp, const float* dout, bf16_t* dout16, bool convert, const float* weight,
                             int lo, int hi, int C, int OC, bool accumulate);
  // Weight gradient over all N rows: dweight += dout^T @ inp, dbias += column sums of dout (if
  // non-null). bf16: from dout16 and inp16 (already converted).
  void linear_weight_grad(float* dweight, float* dbias, const float* dout, const bf16_t* dout16, const float* inp,
                          const bf16_t* inp16, int N, int C, int OC);
  // The configured norm (LayerNorm: mean and bias used; RMSNorm: mean and bias nullptr) on n rows.
  void norm_forward(float* out, float* mean, float* rstd, const float* in, const float* w, const float* b, int n);
  void norm_backward(float* dinp, float* dw, float* db, const float* dout, const float* in, const float* w,
                     const float* mean, const float* rstd, int n);
  // RoPE on rows [lo, hi) of a qkv (or its gradient) buffer; nothing with learned positions.
  void rope_rows(float* qkv, int lo, int hi, int T, bool backward);
  // The attention core of block l from its qkv into a.atty / a.att_lse (and, bf16 with convert, its
  // bf16 copy): forward, and selective recomputation's re-run.
  void attention_core(int l, int B, int T);
  void block_forward(int l, const float* x, int B, int T);
  void block_backward(int l, const float* x, int B, int T);
  // recompute='full': re-runs the forward of the group of blocks ending at block `last`.
  void recompute_group(int last, int B, int T);
  const float* block_input(int l) const { return l == 0 ? a_->encoded : a_->blocks[l - 1].out; }
  bool group_last(int l) const { return group_ > 0 && ((l + 1) % group_ == 0 || l + 1 == L_); }
  void embedding_forward(const int* inputs, int B, int T);
  void embedding_backward(int B, int T, bool defer_token_rows);
  void lm_head_forward(const float* x, int N);
  // targets: the device copy; host_targets: the caller's host array (same values).
  float cross_entropy(const int* targets, const int* host_targets, int N, float dloss);
  // The whole layout's initial values into host memory base, zeroed by the caller (init_weights).
  void init_weights_host(uint64_t seed, float* base) const;
  void lm_head_backward(int N);
  // The bias of a row-parallel layer (replicated): added by part 0 only, so the sum over parts holds it once.
  const float* row_parallel_bias(const float* b) const { return shard_.index == 0 ? b : nullptr; }
  // Where a reduce_rows region sums into out: out itself for one part, else the partial scratch.
  float* partial_for(float* out) { return shard_.parts == 1 ? out : sc_.partial; }
  ActDims act_dims(int slots) const { return ActDims{cfg_, maxB_, maxT_, precision_, shard_, slots}; }

  ModelConfig cfg_;
  int maxB_, maxT_;
  int L_, C_, NH_, V_, Vp_;  // L_: blocks held (all of them unless a pipeline chunk)
  ModelShard shard_;
  int l0_ = 0;               // global index of the first block held
  bool has_emb_ = true, has_head_ = true;
  int NHl_, NKVl_, HS_, Cl_, QKVl_, Fl_, FCl_, Vl_, v0_;  // local shapes (see the header comment)
  int group_ = 0;                // recompute='full': blocks per recompute group (0: no full recompute)
  bool rows_exchanged_ = false;  // sequence parallel with P > 1: the residual stream holds n < N rows
  TensorRegions identity_regions_;
  TensorRegions* regions_ = &identity_regions_;
  std::vector<ParamSpec> specs_;
  std::vector<size_t> block_offset_;  // offset of each block's first tensor
  std::vector<BlockOffsets> block_tensors_;  // each held block's tensors
  // Offsets (param_layout.h); wpe_ == size and lnf_b_ == size when absent; head_ == wte_ when tied.
  size_t wte_ = 0, wpe_ = 0, lnf_w_ = 0, lnf_b_ = 0, head_ = 0;
  bool has_wpe_ = false, has_lnf_b_ = false;
  KernelBackend* k_ = nullptr;  // the device's kernels (not owned); every buffer lives on k_->device()
  DeviceArray<float> params_, grads_;
  DeviceArray<float> rope_cos_, rope_sin_;  // (maxT, HS/2) positions = rope only

  // Activations and backward scratch, carved out of one buffer (gpt_activations.h).
  DeviceArray<float> acts_;
  DeviceArray<bf16_t> acts_bf16_;
  DeviceArray<int> inputs_all_, targets_;
  std::vector<ActSlot> slots_;
  ActSlot* a_ = nullptr;  // the selected slot
  int slot_ = 0;
  ActScratch sc_;
  DType precision_ = DType::kF32;
  Bf16WeightCache bf16_weights_;
  RangeHook grad_ready_, param_wait_;
  bool defer_token_grad_ = false;            // defer_token_grad(): the next backward only
  const float* token_grad_rows_ = nullptr;   // (N,C) the deferred lookup rows, after such a backward
  // [begin, end) of block l's parameters (l == L_: ln_f and the rest).
  size_t block_end(int l) const { return l + 1 < L_ ? block_offset_[l + 1] : lnf_w_; }
};

}  // namespace ms
