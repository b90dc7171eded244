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

ParamLayout build_param_layout(const ModelConfig& cfg, const ModelShard& shard) {
  const int P = shard.parts;
  MS_CHECK(P >= 1 && shard.index >= 0 && shard.index < P, "param layout: part {} of {} is not a part", shard.index, P);
  const int C = cfg.n_embd, L = cfg.n_layer, Vp = cfg.padded_vocab();
  MS_CHECK(cfg.n_head % P == 0 && (4 * C) % P == 0 && Vp % P == 0,
           "param layout: {} tensor-parallel parts must divide n_head={}, 4*n_embd={} and the padded vocabulary {}",
           P, cfg.n_head, 4 * C, Vp);
  const int l0 = shard.layer_begin, l1 = shard.end_layer(L);
  MS_CHECK(l0 >= 0 && l0 < l1 && l1 <= L, "param layout: layers [{}, {}) are not a non-empty range of the {} layers",
           l0, l1, L);
  const bool emb = shard.has_embedding(), head = shard.has_head(L);
  ParamLayout lay;
  int index = 0;  // position in the whole model's list, counted for tensors held or not
  const float std0 = cfg.init_std, std_res = cfg.init_std / std::sqrt(2.0f * L);
  size_t off = 0;
  auto add = [&](std::string name, std::vector<int> full, ParamSplit split, ParamKind kind, float init_std,
                 bool held = true) {
    const int my_index = index++;
    if (!held) return size_t{0};
    std::vector<int> shape = full;
    if (split == ParamSplit::kRows || split == ParamSplit::kQkvRows) shape[0] /= P;
    if (split == ParamSplit::kCols) shape[1] /= P;
    ParamSpec s{std::move(name), off, std::move(shape), kind, init_std, std::move(full), P > 1 ? split : ParamSplit::kReplicated};
    // Replicated tensors computed on this part's rows only: LayerNorms and the position embedding.
    s.grad_partial = P > 1 && shard.seq_sharded && (kind == ParamKind::kNorm || s.name == "transformer.wpe.weight");
    s.index = my_index;
    off += s.numel();
    lay.specs.push_back(std::move(s));
    return lay.specs.back().offset;
  };
  using S = ParamSplit;
  lay.wte = add(kTokenEmbeddingName, {Vp, C}, S::kRows, ParamKind::kEmbedding, std0, emb || head);
  const bool has_wte = emb || head;
  lay.wpe = add("transformer.wpe.weight", {cfg.max_seq_len, C}, S::kReplicated, ParamKind::kEmbedding, std0, emb);
  for (int l = 0; l < L; l++) {
    const bool held = l >= l0 && l < l1;
    std::string p = "transformer.h." + std::to_string(l) + ".";
    if (held) lay.block_offset.push_back(off);
    add(p + "ln_1.weight", {C}, S::kReplicated, ParamKind::kNorm, 0, held);
    add(p + "ln_1.bias", {C}, S::kReplicated, ParamKind::kNorm, 0, held);
    add(p + "attn.c_attn.weight", {3 * C, C}, S::kQkvRows, ParamKind::kWeight, std0, held);
    add(p + "attn.c_attn.bias", {3 * C}, S::kQkvRows, ParamKind::kBias, 0, held);
    add(p + "attn.c_proj.weight", {C, C}, S::kCols, ParamKind::kWeight, std_res, held);
    add(p + "attn.c_proj.bias", {C}, S::kReplicated, ParamKind::kBias, 0, held);
    if (!cfg.parallel_block()) {
      add(p + "ln_2.weight", {C}, S::kReplicated, ParamKind::kNorm, 0, held);
      add(p + "ln_2.bias", {C}, S::kReplicated, ParamKind::kNorm, 0, held);
    }
    add(p + "mlp.c_fc.weight", {4 * C, C}, S::kRows, ParamKind::kWeight, std0, held);
    add(p + "mlp.c_fc.bias", {4 * C}, S::kRows, ParamKind::kBias, 0, held);
    add(p + "mlp.c_proj.weight", {C, 4 * C}, S::kCols, ParamKind::kWeight, std_res, held);
    add(p + "mlp.c_proj.bias", {C}, S::kReplicated, ParamKind::kBias, 0, held);
  }
  lay.blocks_end = off;
  lay.lnf_w = add("transformer.ln_f.weight", {C}, S::kReplicated, ParamKind::kNorm, 0, head);
  lay.lnf_b = add("transformer.ln_f.bias", {C}, S::kReplicated, ParamKind::kNorm, 0, head);
  lay.total = off;
  if (!has_wte) lay.wte = off;
  if (!emb) lay.wpe = off;
  if (!head) lay.lnf_w = lay.lnf_b = off;
  return lay;
}

}  // namespace ms
