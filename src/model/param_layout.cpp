// param_layout.cpp: see param_layout.h.
#include "model/param_layout.h"

#include <cmath>  // std::sqrt

namespace ms {

size_t ParamSpec::numel() const {
  size_t n = 1;
  for (int d : shape) n *= static_cast<size_t>(d);
  return n;
}

ParamLayout build_param_layout(const ModelConfig& cfg) {
  ParamLayout lay;
  const int C = cfg.n_embd, L = cfg.n_layer;
  const float std0 = cfg.init_std, std_res = cfg.init_std / std::sqrt(2.0f * L);
  size_t off = 0;
  auto add = [&](std::string name, std::vector<int> shape, ParamKind kind, float init_std) {
    ParamSpec s{std::move(name), off, std::move(shape), kind, init_std};
    off += s.numel();
    lay.specs.push_back(std::move(s));
    return lay.specs.back().offset;
  };
  lay.wte = add("transformer.wte.weight", {cfg.padded_vocab(), C}, ParamKind::kEmbedding, std0);
  lay.wpe = add("transformer.wpe.weight", {cfg.max_seq_len, C}, ParamKind::kEmbedding, std0);
  for (int l = 0; l < L; l++) {
    std::string p = "transformer.h." + std::to_string(l) + ".";
    lay.block_offset.push_back(off);
    add(p + "ln_1.weight", {C}, ParamKind::kNorm, 0);
    add(p + "ln_1.bias", {C}, ParamKind::kNorm, 0);
    add(p + "attn.c_attn.weight", {3 * C, C}, ParamKind::kWeight, std0);
    add(p + "attn.c_attn.bias", {3 * C}, ParamKind::kBias, 0);
    add(p + "attn.c_proj.weight", {C, C}, ParamKind::kWeight, std_res);
    add(p + "attn.c_proj.bias", {C}, ParamKind::kBias, 0);
    if (!cfg.parallel_block()) {
      add(p + "ln_2.weight", {C}, ParamKind::kNorm, 0);
      add(p + "ln_2.bias", {C}, ParamKind::kNorm, 0);
    }
    add(p + "mlp.c_fc.weight", {4 * C, C}, ParamKind::kWeight, std0);
    add(p + "mlp.c_fc.bias", {4 * C}, ParamKind::kBias, 0);
    add(p + "mlp.c_proj.weight", {C, 4 * C}, ParamKind::kWeight, std_res);
    add(p + "mlp.c_proj.bias", {C}, ParamKind::kBias, 0);
  }
  lay.lnf_w = add("transformer.ln_f.weight", {C}, ParamKind::kNorm, 0);
  lay.lnf_b = add("transformer.ln_f.bias", {C}, ParamKind::kNorm, 0);
  lay.total = off;
  return lay;
}

}  // namespace ms
