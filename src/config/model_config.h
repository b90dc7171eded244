// model_config: the [model] section of the config tree: the decoder's shape, its family (GPT-2 or
// Llama-style pieces, each chosen on its own), MegaScale's variants and activation recomputation.
// Fields are declared once, in the X-macro list below (X(type, name, default, doc)); config.h builds
// loading, overrides, help, the resolved dump and validation from it. `preset` is applied before
// the other keys of the same source (a file, the command line), so explicit keys override it.
#pragma once
#include <string>

#include "config/config_enum.h"  // MS_CONFIG_ENUM, MS_DECLARE_FIELD

namespace ms {

// model.block: GPT-2's sequential block or MegaScale's parallel block.
enum class BlockKind : uint8_t { kSequential, kParallel };
MS_CONFIG_ENUM(BlockKind, {BlockKind::kSequential, "sequential"}, {BlockKind::kParallel, "parallel"})
// model.attention: full causal attention or sliding-window attention.
enum class AttentionKind : uint8_t { kFull, kSliding };
MS_CONFIG_ENUM(AttentionKind, {AttentionKind::kFull, "full"}, {AttentionKind::kSliding, "sliding"})
// model.preset: a family's defaults for norm, positions, mlp, tie_embeddings and bias.
enum class ModelPreset : uint8_t { kGpt2, kLlama };
MS_CONFIG_ENUM(ModelPreset, {ModelPreset::kGpt2, "gpt2"}, {ModelPreset::kLlama, "llama"})
// model.norm: LayerNorm (weight and bias) or RMSNorm (weight only).
enum class NormKind : uint8_t { kLayerNorm, kRmsNorm };
MS_CONFIG_ENUM(NormKind, {NormKind::kLayerNorm, "layernorm"}, {NormKind::kRmsNorm, "rmsnorm"})
// model.positions: a learned position embedding added to the tokens, or rotary embeddings on Q and K.
enum class PositionKind : uint8_t { kLearned, kRope };
MS_CONFIG_ENUM(PositionKind, {PositionKind::kLearned, "learned"}, {PositionKind::kRope, "rope"})
// model.mlp: GeLU MLP (fc, GeLU, projection) or SwiGLU (gate and up projections, silu(gate)*up, down).
enum class MlpKind : uint8_t { kGelu, kSwiglu };
MS_CONFIG_ENUM(MlpKind, {MlpKind::kGelu, "gelu"}, {MlpKind::kSwiglu, "swiglu"})
// model.bias: which linear layers have biases.
enum class BiasKind : uint8_t { kAll, kNone, kQkv };
MS_CONFIG_ENUM(BiasKind, {BiasKind::kAll, "all"}, {BiasKind::kNone, "none"}, {BiasKind::kQkv, "qkv"})
// model.recompute: activation recomputation in backward.
enum class RecomputeKind : uint8_t { kNone, kSelective, kFull };
MS_CONFIG_ENUM(RecomputeKind, {RecomputeKind::kNone, "none"}, {RecomputeKind::kSelective, "selective"},
               {RecomputeKind::kFull, "full"})

#define MS_MODEL_FIELDS(X)                                                                        \
  X(ModelPreset, preset, ModelPreset::kGpt2, "family defaults, applied before this source's other [model] keys: 'gpt2' (norm=layernorm, positions=learned, mlp=gelu, tie_embeddings=true, bias=all) or 'llama' (norm=rmsnorm, positions=rope, mlp=swiglu, tie_embeddings=false, bias=none)") \
  X(int, vocab_size, 50257, "vocabulary size V of the tokenizer (GPT-2 BPE: 50257)")             \
  X(int, pad_vocab_to, 64, "the embedding/LM head is padded to Vp, a multiple of this (padded logits never enter the loss)") \
  X(int, n_layer, 6, "number of transformer blocks L")                                            \
  X(int, n_head, 6, "attention (query) heads NH; must divide n_embd")                             \
  X(int, n_kv_head, 0, "key/value heads NKV for grouped-query attention (0 = n_head: multi-head; 1: multi-query); must divide n_head") \
  X(int, n_embd, 384, "channels C (head size HS = C / NH)")                                       \
  X(int, ffn_hidden, 0, "MLP hidden size F (0 = 4C for mlp='gelu'; for 'swiglu' 2/3 of 4C rounded up to a multiple of 64, which keeps the GeLU MLP's parameters; set it to apply another rounding, e.g. Llama's multiple_of)") \
  X(int, max_seq_len, 1024, "maximum sequence length (rows of the learned position embedding; positions of the RoPE table)") \
  X(NormKind, norm, NormKind::kLayerNorm, "normalisation of every block and the final norm: 'layernorm' or 'rmsnorm'") \
  X(float, norm_eps, 1e-5f, "epsilon added to the variance (layernorm) or mean square (rmsnorm)") \
  X(PositionKind, positions, PositionKind::kLearned, "'learned' position embedding (GPT-2) or 'rope' (rotary embedding of Q and K, Hugging Face Llama's rotate-half convention)") \
  X(float, rope_theta, 10000.0f, "RoPE base theta (positions='rope'): channel pair i of a head turns by t * theta^(-2i/HS); Llama 2: 10000, Llama 3: 500000") \
  X(MlpKind, mlp, MlpKind::kGelu, "MLP: 'gelu' (fc, tanh GeLU, projection) or 'swiglu' (down(silu(gate x) * up x))") \
  X(bool, tie_embeddings, true, "the LM head is the token embedding (GPT-2); false: a separate lm_head weight (Llama)") \
  X(BiasKind, bias, BiasKind::kAll, "biases of the linear layers: 'all' (GPT-2), 'none' (Llama) or 'qkv' (only the query/key/value projections: Qwen2)") \
  X(BlockKind, block, BlockKind::kSequential, "transformer block: 'sequential' (GPT-2: x+Attn(LN1 x), then +MLP(LN2 .)) or 'parallel' (MegaScale/GPT-J: x + Attn(LN x) + MLP(LN x), one shared LN)") \
  X(AttentionKind, attention, AttentionKind::kFull, "'full' causal attention or 'sliding' window attention")      \
  X(int, window, 256, "sliding window W: token t attends t-W+1..t (attention='sliding' only); must be > 0") \
  X(int, full_every, 0, "with attention='sliding': every k-th layer (layers k-1, 2k-1, ... counting from 0) uses full attention; 0 = none") \
  X(RecomputeKind, recompute, RecomputeKind::kNone, "activation recomputation: 'none', 'selective' (the attention core is recomputed in backward: its output and log-sum-exp are not kept) or 'full' (only the input of every recompute_every-th layer is kept; backward re-runs the forward of those layers); results are bit-identical to 'none'") \
  X(int, recompute_every, 1, "recompute='full': layers are recomputed in groups of this many consecutive layers of a pipeline chunk; only each group's input is kept") \
  X(float, init_std, 0.02f, "std of the normal init of weights (residual projections get init_std/sqrt(2L), GPT-2 style)")

struct ModelConfig {
  MS_MODEL_FIELDS(MS_DECLARE_FIELD)
  // Sets the family fields (norm, positions, mlp, tie_embeddings, bias) to `preset`'s values.
  void apply_preset();
  // Checks the fields of this section alone; Config::validate() runs it, then the cross-section checks.
  void validate() const;
  int padded_vocab() const { return (vocab_size + pad_vocab_to - 1) / pad_vocab_to * pad_vocab_to; }
  int head_size() const { return n_embd / n_head; }
  int kv_heads() const { return n_kv_head > 0 ? n_kv_head : n_head; }
  // Width of the packed query/key/value projection: (NH + 2 NKV) * HS (3C without grouped queries).
  int qkv_width() const { return (n_head + 2 * kv_heads()) * head_size(); }
  // MLP hidden size F (ffn_hidden, or its default for the mlp).
  int ffn() const {
    if (ffn_hidden > 0) return ffn_hidden;
    if (mlp == MlpKind::kGelu) return 4 * n_embd;
    return (8 * n_embd / 3 + 63) / 64 * 64;
  }
  // Width of the MLP's first GEMM: F (gelu), or 2F (swiglu: gate and up stacked).
  int fc_width() const { return mlp == MlpKind::kSwiglu ? 2 * ffn() : ffn(); }
  bool parallel_block() const { return block == BlockKind::kParallel; }
  bool rmsnorm() const { return norm == NormKind::kRmsNorm; }
  bool rope() const { return positions == PositionKind::kRope; }
  bool swiglu() const { return mlp == MlpKind::kSwiglu; }
  bool qkv_bias() const { return bias != BiasKind::kNone; }
  bool linear_bias() const { return bias == BiasKind::kAll; }  // projections and MLP
  // Attention window of layer l: 0 = full causal.
  int layer_window(int l) const {
    if (attention != AttentionKind::kSliding) return 0;
    if (full_every > 0 && (l + 1) % full_every == 0) return 0;
    return window;
  }
  // recompute='full': the layers of a chunk [l0, l1) are recomputed in groups of recompute_every.
  bool full_recompute() const { return recompute == RecomputeKind::kFull; }
  bool selective_recompute() const { return recompute == RecomputeKind::kSelective; }
};

}  // namespace ms
