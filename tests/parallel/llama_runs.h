// llama_runs: the Llama-style configuration the layout tests train (test_llama_layouts,
// test_slow_llama_layouts, the Llama checkpoint tests): the pipeline suite's data and run
// (pp_runs.h: 8 layers, C = 64, 4 heads, T = 64, global batch 8) with the llama preset (RMSNorm,
// RoPE, SwiGLU, no biases, untied LM head), 2 key/value heads (grouped-query attention: tp = 2
// holds one of each), ffn_hidden = 96 (divisible by tp = 2 and 4: 48 and 24 rows), sliding window
// with full attention every 2nd layer (tp_runs.h), rope_theta 10000.
#pragma once
#include <string>

#include "parallel/pp_runs.h"

namespace ms::testing {

inline std::string llama_config() {
  std::string c = pp_config();
  const std::string model = "[model]\n";
  c.replace(c.find(model), model.size(), model + "preset = \"llama\"\nn_kv_head = 2\nffn_hidden = 96\n");
  return c;
}

}  // namespace ms::testing
