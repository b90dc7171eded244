// model_config: the [model] section of the config tree: the GPT's shape and its MegaScale variants.
// Fields are declared once, in the X-macro list below (X(type, name, default, doc)); config.h builds
// loading, overrides, help, the resolved dump and validation from it.
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

#define MS_MODEL_FIELDS(X)                                                                        \
  X(int, vocab_size, 50257, "vocabulary size V of the tokenizer (GPT-2 BPE: 50257)")             \
  X(int, pad_vocab_to, 64, "the embedding/LM head is padded to Vp, a multiple of this (padded logits never enter the loss)") \
  X(int, n_layer, 6, "number of transformer blocks L")                                            \
  X(int, n_head, 6, "attention heads NH; must divide n_embd")                                     \
  X(int, n_embd, 384, "channels C (head size HS = C / NH)")                                       \
  X(int, max_seq_len, 1024, "maximum sequence length (rows of the learned position embedding)")   \
  X(BlockKind, block, BlockKind::kSequential, "transformer block: 'sequential' (GPT-2: x+Attn(LN1 x), then +MLP(LN2 .)) or 'parallel' (MegaScale/GPT-J: x + Attn(LN x) + MLP(LN x), one shared LN)") \
  X(AttentionKind, attention, AttentionKind::kFull, "'full' causal attention or 'sliding' window attention")      \
  X(int, window, 256, "sliding window W: token t attends t-W+1..t (attention='sliding' only); must be > 0") \
  X(int, full_every, 0, "with attention='sliding': every k-th layer (layers k-1, 2k-1, ... counting from 0) uses full attention; 0 = none") \
  X(float, init_std, 0.02f, "std of the normal init of weights (residual projections get init_std/sqrt(2L), GPT-2 style)")

struct ModelConfig {
  MS_MODEL_FIELDS(MS_DECLARE_FIELD)
  // Checks the fields of this section alone; Config::validate() runs it, then the cross-section checks.
  void validate() const;
  int padded_vocab() const { return (vocab_size + pad_vocab_to - 1) / pad_vocab_to * pad_vocab_to; }
  int head_size() const { return n_embd / n_head; }
  bool parallel_block() const { return block == BlockKind::kParallel; }
  // Attention window of layer l: 0 = full causal.
  int layer_window(int l) const {
    if (attention != AttentionKind::kSliding) return 0;
    if (full_every > 0 && (l + 1) % full_every == 0) return 0;
    return window;
  }
};

}  // namespace ms
