// param_layout: where every parameter tensor of the GPT lives in the one flat parameter buffer
// (and, at the same offsets, in the gradient buffer and the bf16 weight copy). Names are Hugging
// Face GPT-2 names; shapes are our layout (nn.Linear (out, in) for weights). Order: token and
// position embeddings, then each block's tensors, then the final LayerNorm, so a forward reads
// ranges in increasing offset order and a backward finishes them in decreasing order.
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

// The token embedding's tensor name (Hugging Face GPT-2's), shared by the LM head (tied weights):
// the tensor a pipeline's first and last stages both hold.
inline constexpr const char* kTokenEmbeddingName = "transformer.wte.weight";

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

struct ParamLayout {
  std::vector<ParamSpec> specs;        // every tensor held, in offset order
  std::vector<size_t> block_offset;    // offset of each held block's first tensor
  // Offsets of the embeddings, the final LayerNorm; a tensor not held has offset `total`.
  // Order: wte (when held), wpe, the blocks, ln_f.
  size_t wte = 0, wpe = 0, lnf_w = 0, lnf_b = 0;
  size_t blocks_end = 0;               // one past the last block's tensors
  size_t total = 0;                    // elements of the flat buffer
};

// The layout of cfg's model as held by `shard` (sequential blocks have ln_2, parallel blocks do
// not; the token embedding has Vp = padded_vocab() rows, Vp/parts per part). Names keep the whole
// model's layer numbers. Throws when the layer range is empty or outside [0, n_layer).
ParamLayout build_param_layout(const ModelConfig& cfg, const ModelShard& shard = {});

// Copies part `index` of `parts` of the whole tensor `full` (full_numel) into `local` (numel).
void slice_param(const ParamSpec& s, int parts, int index, const float* full, float* local);
// The inverse: writes `local`, part `index` of `parts`, into its place in the whole tensor `full`.
void place_param(const ParamSpec& s, int parts, int index, const float* local, float* full);

}  // namespace ms
