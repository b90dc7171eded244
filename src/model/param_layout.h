// param_layout: where every parameter tensor of the decoder lives in the one flat parameter buffer
// (and, at the same offsets, in the gradient buffer and the bf16 weight copy). Names are Hugging
// Face names: GPT-2's (transformer.h.0.attn.c_attn.weight, ...) for a model GPT-2's format holds
// (gpt2_names()), else Llama's (model.layers.0.self_attn.q_proj.weight, ...; a learned position
// embedding is model.embed_positions.weight, norms with a bias get <norm>.bias, a GeLU MLP is
// up_proj + down_proj). Shapes are our layout (nn.Linear (out, in) for weights). Order: token and
// position embeddings, then each block's tensors, then the final norm and an untied LM head, so a
// forward reads ranges in increasing offset order and a backward finishes them in decreasing order.
// Tensors one GEMM reads together are adjacent, so that a part's slices of them form one matrix:
// q, k and v projections (and their biases), the gate and up projections (and theirs).
// A model cut for tensor parallelism (ModelShard) holds a slice of some tensors (Megatron's
// scheme): column-parallel QKV (its heads of q, k and v) and MLP-up (rows of 4C), row-parallel
// attention and MLP projections (columns), the vocabulary-parallel token embedding / LM head
// (rows of Vp); everything else is replicated. Each spec says how its slice maps into the full
// tensor, so weights initialise, export and import the same for every split.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "config/model_config.h"  // ModelConfig

namespace ms {

// True when the model uses GPT-2's tensor names: Hugging Face's GPT2LMHeadModel holds it
// (LayerNorm, learned positions, GeLU MLP, multi-head attention, tied embeddings, all biases;
// the block and attention variants are megascale_* fields of its config.json).
bool gpt2_names(const ModelConfig& cfg);
// The token embedding's tensor name: transformer.wte.weight or model.embed_tokens.weight. With
// tied embeddings it is also the LM head: the tensor a pipeline's first and last stages both hold.
const char* token_embedding_name(const ModelConfig& cfg);

// How this process's copy of the model is cut (shapes only: the model computes on its local
// shapes; the communication lives in the TensorRegions it is given, model/tensor_regions.h).
// Pipeline parallelism cuts the layers instead: a copy may hold the blocks [layer_begin, layer_end)
// only (a model chunk); the embeddings come with layer 0, the final LayerNorm and the LM head with
// the last layer, so a chunk holding the last layer but not the first keeps its own copy of the
// tied token embedding (Megatron's scheme; the pipeline keeps the copies equal).
struct ModelShard {
  int parts = 1;             // tensor-parallel ranks the model is split over
  int index = 0;             // this rank's part, 0 <= index < parts
  bool seq_sharded = false;  // sequence parallelism: the residual stream (LayerNorm, residual adds,
                             // position embedding) holds rows/parts of the B*T rows on each rank
  int layer_begin = 0;       // pipeline chunk: first block held
  int layer_end = -1;        // one past the last block held; -1 = n_layer
  int end_layer(int n_layer) const { return layer_end < 0 ? n_layer : layer_end; }
  bool has_embedding() const { return layer_begin == 0; }
  bool has_head(int n_layer) const { return end_layer(n_layer) == n_layer; }
  bool whole(int n_layer) const { return parts == 1 && has_embedding() && has_head(n_layer); }
};

// What a parameter tensor is (optim/decay_policy.h decides weight decay from it; the Hugging Face
// export names it).
enum class ParamKind { kEmbedding, kNorm, kBias, kWeight };

// How a tensor is split over ModelShard::parts.
enum class ParamSplit {
  kReplicated,  // every part holds the whole tensor
  kRows,        // dim 0 cut into parts equal row blocks (MLP-up weight and bias, token embedding)
  kCols,        // dim 1 cut into parts equal column blocks (attention / MLP projection weights)
  kQkvRows,     // dim 0 is [q; k; v], each cut into parts row blocks (a part holds its heads of each)
};

// One named parameter tensor inside the flat buffer.
struct ParamSpec {
  std::string name;         // e.g. "transformer.h.0.attn.c_attn.weight"
  size_t offset = 0;        // into the flat parameter buffer
  std::vector<int> shape;   // this part's shape; our layout: nn.Linear (out, in) for weights
  ParamKind kind = ParamKind::kWeight;
  float init_std = 0;       // 0: constant init (ones for LN weight, zeros otherwise)
  std::vector<int> full_shape;  // the whole tensor's shape (== shape when replicated)
  ParamSplit split = ParamSplit::kReplicated;
  // Replicated tensor whose gradient each part computes from its own rows only (sequence
  // parallelism: LayerNorms, position embedding), so the parts' gradients must be summed.
  bool grad_partial = false;
  int index = 0;            // position in the whole model's tensor list (its init stream, its name's order)
  size_t numel() const;
  size_t full_numel() const;
  bool sharded() const { return split != ParamSplit::kReplicated; }
};

// Offsets of one block's tensors in the flat buffer (local shapes). A tensor the model does not
// have (a bias, ln_2 in the parallel block, a bias of an RMSNorm) is kAbsent. qkv_w is the first of
// the q, k, v projections ((NHl + 2 NKVl) HS rows together), fc_w the first of gate and up (SwiGLU:
// 2 Fl rows together); their biases likewise.
inline constexpr size_t kAbsent = static_cast<size_t>(-1);
struct BlockOffsets {
  size_t ln1_w = kAbsent, ln1_b = kAbsent, qkv_w = kAbsent, qkv_b = kAbsent, attn_proj_w = kAbsent,
         attn_proj_b = kAbsent, ln2_w = kAbsent, ln2_b = kAbsent, fc_w = kAbsent, fc_b = kAbsent,
         fc_proj_w = kAbsent, fc_proj_b = kAbsent;
};

struct ParamLayout {
  std::vector<ParamSpec> specs;        // every tensor held, in offset order
  std::vector<size_t> block_offset;    // offset of each held block's first tensor
  std::vector<BlockOffsets> blocks;    // each held block's tensors
  // Offsets of the embeddings, the final norm and the untied LM head; a tensor not held (or not in
  // the model) has offset `total`. Order: wte (when held), wpe, the blocks, ln_f, lm_head.
  size_t wte = 0, wpe = 0, lnf_w = 0, lnf_b = 0, head = 0;
  size_t blocks_end = 0;               // one past the last block's tensors
  size_t total = 0;                    // elements of the flat buffer
};

// The layout of cfg's model as held by `shard` (sequential blocks have ln_2, parallel blocks do
// not; the token embedding and an untied LM head have Vp = padded_vocab() rows, Vp/parts per
// part). Names keep the whole model's layer numbers. Throws when the layer range is empty or
// outside [0, n_layer), or when the parts do not divide the heads, key/value heads, MLP width or Vp.
ParamLayout build_param_layout(const ModelConfig& cfg, const ModelShard& shard = {});

// Copies part `index` of `parts` of the whole tensor `full` (full_numel) into `local` (numel).
void slice_param(const ParamSpec& s, int parts, int index, const float* full, float* local);
// The inverse: writes `local`, part `index` of `parts`, into its place in the whole tensor `full`.
void place_param(const ParamSpec& s, int parts, int index, const float* local, float* full);

}  // namespace ms
