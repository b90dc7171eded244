// param_layout.cpp: see param_layout.h.
#include "model/param_layout.h"

#include <cmath>    // std::sqrt
#include <cstring>  // std::memcpy

#include "base/check.h"  // MS_CHECK

namespace ms {

namespace {
size_t product(const std::vector<int>& shape) {
  size_t n = 1;
  for (int d : shape) n *= static_cast<size_t>(d);
  return n;
}

// Calls f(full_offset, local_offset, count) for every contiguous run of part `index`.
template <class F>
void for_each_run(const ParamSpec& s, int parts, int index, F&& f) {
  if (!s.sharded() || parts == 1) return f(size_t{0}, size_t{0}, s.numel());
  const size_t rows = static_cast<size_t>(s.full_shape[0]);
  const size_t cols = s.full_shape.size() > 1 ? static_cast<size_t>(s.full_shape[1]) : 1;
  switch (s.split) {
    case ParamSplit::kRows: {
      const size_t r = rows / parts;
      return f(index * r * cols, size_t{0}, r * cols);
    }
    case ParamSplit::kQkvRows: {
      const size_t r = rows / 3 / parts;
      for (size_t j = 0; j < 3; j++) f((j * (rows / 3) + index * r) * cols, j * r * cols, r * cols);
      return;
    }
    case ParamSplit::kCols: {
      const size_t c = cols / parts;
      for (size_t i = 0; i < rows; i++) f(i * cols + index * c, i * c, c);
      return;
    }
    case ParamSplit::kReplicated: return;
  }
}
}  // namespace

size_t ParamSpec::numel() const { return product(shape); }
size_t ParamSpec::full_numel() const { return product(full_shape); }

void slice_param(const ParamSpec& s, int parts, int index, const float* full, float* local) {
  for_each_run(s, parts, index, [&](size_t fo, size_t lo, size_t n) { std::memcpy(local + lo, full + fo, n * sizeof(float)); });
}

void place_param(const ParamSpec& s, int parts, int index, const float* local, float* full) {
  for_each_run(s, parts, index, [&](size_t fo, size_t lo, size_t n) { std::memcpy(full + fo, local + lo, n * sizeof(float)); });
}

bool gpt2_names(const ModelConfig& cfg) {
  return cfg.norm == NormKind::kLayerNorm && cfg.positions == PositionKind::kLearned && cfg.mlp == MlpKind::kGelu &&
         cfg.kv_heads() == cfg.n_head && cfg.tie_embeddings && cfg.bias == BiasKind::kAll && cfg.ffn() == 4 * cfg.n_embd;
}

const char* token_embedding_name(const ModelConfig& cfg) {
  return gpt2_names(cfg) ? "transformer.wte.weight" : "model.embed_tokens.weight";
}

namespace {

// Adds specs to a layout in order; `index` counts every tensor of the whole model, held or not.
class LayoutBuilder {
 public:
  LayoutBuilder(ParamLayout& lay, const ModelShard& shard) : lay_(lay), shard_(shard) {}
  // Returns the offset of the tensor (0 when not held).
  size_t add(std::string name, std::vector<int> full, ParamSplit split, ParamKind kind, float init_std, bool held) {
    const int P = shard_.parts, my_index = index_++;
    if (!held) return 0;
    std::vector<int> shape = full;
    if (split == ParamSplit::kRows || split == ParamSplit::kQkvRows) shape[0] /= P;
    if (split == ParamSplit::kCols) shape[1] /= P;
    const bool position = name.ends_with("wpe.weight") || name.ends_with("embed_positions.weight");
    ParamSpec s{std::move(name), off_, std::move(shape), kind, init_std, std::move(full),
                P > 1 ? split : ParamSplit::kReplicated};
    // Replicated tensors computed on this part's rows only: the norms and the position embedding.
    s.grad_partial = P > 1 && shard_.seq_sharded && (kind == ParamKind::kNorm || position);
    s.index = my_index;
    off_ += s.numel();
    lay_.specs.push_back(std::move(s));
    return lay_.specs.back().offset;
  }
  size_t offset() const { return off_; }

 private:
  ParamLayout& lay_;
  const ModelShard& shard_;
  int index_ = 0;
  size_t off_ = 0;
};

using S = ParamSplit;
using K = ParamKind;

// One GPT-2-named block (transformer.h.<l>.): c_attn is q, k and v stacked (kQkvRows).
BlockOffsets add_gpt2_block(LayoutBuilder& b, const ModelConfig& cfg, int l, bool held, float std0, float std_res) {
  const int C = cfg.n_embd;
  const std::string p = "transformer.h." + std::to_string(l) + ".";
  BlockOffsets o;
  o.ln1_w = b.add(p + "ln_1.weight", {C}, S::kReplicated, K::kNorm, 0, held);
  o.ln1_b = b.add(p + "ln_1.bias", {C}, S::kReplicated, K::kNorm, 0, held);
  o.qkv_w = b.add(p + "attn.c_attn.weight", {3 * C, C}, S::kQkvRows, K::kWeight, std0, held);
  o.qkv_b = b.add(p + "attn.c_attn.bias", {3 * C}, S::kQkvRows, K::kBias, 0, held);
  o.attn_proj_w = b.add(p + "attn.c_proj.weight", {C, C}, S::kCols, K::kWeight, std_res, held);
  o.attn_proj_b = b.add(p + "attn.c_proj.bias", {C}, S::kReplicated, K::kBias, 0, held);
  if (!cfg.parallel_block()) {
    o.ln2_w = b.add(p + "ln_2.weight", {C}, S::kReplicated, K::kNorm, 0, held);
    o.ln2_b = b.add(p + "ln_2.bias", {C}, S::kReplicated, K::kNorm, 0, held);
  }
  o.fc_w = b.add(p + "mlp.c_fc.weight", {4 * C, C}, S::kRows, K::kWeight, std0, held);
  o.fc_b = b.add(p + "mlp.c_fc.bias", {4 * C}, S::kRows, K::kBias, 0, held);
  o.fc_proj_w = b.add(p + "mlp.c_proj.weight", {C, 4 * C}, S::kCols, K::kWeight, std_res, held);
  o.fc_proj_b = b.add(p + "mlp.c_proj.bias", {C}, S::kReplicated, K::kBias, 0, held);
  return o;
}

// One Llama-named block (model.layers.<l>.): separate q/k/v and gate/up projections, adjacent.
BlockOffsets add_llama_block(LayoutBuilder& b, const ModelConfig& cfg, int l, bool held, float std0, float std_res) {
  const int C = cfg.n_embd, HS = cfg.head_size(), Q = cfg.n_head * HS, KV = cfg.kv_heads() * HS, F = cfg.ffn();
  const bool ln = cfg.norm == NormKind::kLayerNorm, qkv_bias = cfg.qkv_bias(), bias = cfg.linear_bias();
  const std::string p = "model.layers." + std::to_string(l) + ".";
  auto norm = [&](const std::string& name, size_t& w, size_t& bi) {
    w = b.add(p + name + ".weight", {C}, S::kReplicated, K::kNorm, 0, held);
    if (ln) bi = b.add(p + name + ".bias", {C}, S::kReplicated, K::kNorm, 0, held);
  };
  BlockOffsets o;
  norm("input_layernorm", o.ln1_w, o.ln1_b);
  o.qkv_w = b.add(p + "self_attn.q_proj.weight", {Q, C}, S::kRows, K::kWeight, std0, held);
  b.add(p + "self_attn.k_proj.weight", {KV, C}, S::kRows, K::kWeight, std0, held);
  b.add(p + "self_attn.v_proj.weight", {KV, C}, S::kRows, K::kWeight, std0, held);
  if (qkv_bias) {
    o.qkv_b = b.add(p + "self_attn.q_proj.bias", {Q}, S::kRows, K::kBias, 0, held);
    b.add(p + "self_attn.k_proj.bias", {KV}, S::kRows, K::kBias, 0, held);
    b.add(p + "self_attn.v_proj.bias", {KV}, S::kRows, K::kBias, 0, held);
  }
  o.attn_proj_w = b.add(p + "self_attn.o_proj.weight", {C, Q}, S::kCols, K::kWeight, std_res, held);
  if (bias) o.attn_proj_b = b.add(p + "self_attn.o_proj.bias", {C}, S::kReplicated, K::kBias, 0, held);
  if (!cfg.parallel_block()) norm("post_attention_layernorm", o.ln2_w, o.ln2_b);
  if (cfg.swiglu()) {
    o.fc_w = b.add(p + "mlp.gate_proj.weight", {F, C}, S::kRows, K::kWeight, std0, held);
    b.add(p + "mlp.up_proj.weight", {F, C}, S::kRows, K::kWeight, std0, held);
    if (bias) {
      o.fc_b = b.add(p + "mlp.gate_proj.bias", {F}, S::kRows, K::kBias, 0, held);
      b.add(p + "mlp.up_proj.bias", {F}, S::kRows, K::kBias, 0, held);
    }
  } else {
    o.fc_w = b.add(p + "mlp.up_proj.weight", {F, C}, S::kRows, K::kWeight, std0, held);
    if (bias) o.fc_b = b.add(p + "mlp.up_proj.bias", {F}, S::kRows, K::kBias, 0, held);
  }
  o.fc_proj_w = b.add(p + "mlp.down_proj.weight", {C, F}, S::kCols, K::kWeight, std_res, held);
  if (bias) o.fc_proj_b = b.add(p + "mlp.down_proj.bias", {C}, S::kReplicated, K::kBias, 0, held);
  return o;
}

}  // namespace

ParamLayout build_param_layout(const ModelConfig& cfg, const ModelShard& shard) {
  const int P = shard.parts;
  MS_CHECK(P >= 1 && shard.index >= 0 && shard.index < P, "param layout: part {} of {} is not a part", shard.index, P);
  const int C = cfg.n_embd, L = cfg.n_layer, Vp = cfg.padded_vocab();
  MS_CHECK(cfg.n_head % P == 0 && cfg.kv_heads() % P == 0 && cfg.ffn() % P == 0 && Vp % P == 0,
           "param layout: {} tensor-parallel parts must divide n_head={}, n_kv_head={}, the MLP width {} and the "
           "padded vocabulary {}", P, cfg.n_head, cfg.kv_heads(), cfg.ffn(), Vp);
  const int l0 = shard.layer_begin, l1 = shard.end_layer(L);
  MS_CHECK(l0 >= 0 && l0 < l1 && l1 <= L, "param layout: layers [{}, {}) are not a non-empty range of the {} layers",
           l0, l1, L);
  const bool emb = shard.has_embedding(), head = shard.has_head(L), gpt2 = gpt2_names(cfg);
  const bool tied = cfg.tie_embeddings, learned = cfg.positions == PositionKind::kLearned;
  const bool ln = cfg.norm == NormKind::kLayerNorm;
  ParamLayout lay;
  LayoutBuilder b(lay, shard);
  const float std0 = cfg.init_std, std_res = cfg.init_std / std::sqrt(2.0f * L);
  const bool has_wte = emb || (head && tied);
  lay.wte = b.add(token_embedding_name(cfg), {Vp, C}, S::kRows, K::kEmbedding, std0, has_wte);
  if (learned)
    lay.wpe = b.add(gpt2 ? "transformer.wpe.weight" : "model.embed_positions.weight", {cfg.max_seq_len, C},
                    S::kReplicated, K::kEmbedding, std0, emb);
  for (int l = 0; l < L; l++) {
    const bool held = l >= l0 && l < l1;
    if (held) lay.block_offset.push_back(b.offset());
    BlockOffsets o = gpt2 ? add_gpt2_block(b, cfg, l, held, std0, std_res) : add_llama_block(b, cfg, l, held, std0, std_res);
    if (held) lay.blocks.push_back(o);
  }
  lay.blocks_end = b.offset();
  const std::string norm = gpt2 ? "transformer.ln_f" : "model.norm";
  lay.lnf_w = b.add(norm + ".weight", {C}, S::kReplicated, K::kNorm, 0, head);
  if (ln) lay.lnf_b = b.add(norm + ".bias", {C}, S::kReplicated, K::kNorm, 0, head);
  if (!tied) lay.head = b.add("lm_head.weight", {Vp, C}, S::kRows, K::kWeight, std0, head);
  lay.total = b.offset();
  if (!has_wte) lay.wte = lay.total;
  if (!emb || !learned) lay.wpe = lay.total;
  if (!head) lay.lnf_w = lay.total;
  if (!head || !ln) lay.lnf_b = lay.total;
  if (!head || tied) lay.head = lay.total;
  return lay;
}

}  // namespace ms
