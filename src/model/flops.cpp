// flops.cpp: see flops.h.
#include "model/flops.h"

#include <algorithm>  // std::min

namespace ms {

double model_flops_per_token(const ModelConfig& cfg, int T) {
  const double C = cfg.n_embd, QKV = cfg.qkv_width(), FC = cfg.fc_width(), F = cfg.ffn();
  double fwd = 0;
  for (int l = 0; l < cfg.n_layer; l++) {
    fwd += 2.0 * (QKV * C + C * C + FC * C + F * C);  // qkv, proj, fc (gate and up for SwiGLU), fc_proj
    // Attention: QK^T and PV, 2*C flops each per (query, attended key) over the NH query heads
    // (grouped key/value heads change no FLOPs); averaged over positions.
    const int W = cfg.layer_window(l);
    double keys = 0;
    for (int t = 0; t < T; t++) keys += (W > 0) ? std::min(t + 1, W) : t + 1;
    fwd += 2.0 * 2.0 * C * keys / T;
  }
  fwd += 2.0 * C * cfg.vocab_size;  // LM head
  return 3.0 * fwd;
}

}  // namespace ms
