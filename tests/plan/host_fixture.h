// host_fixture: a small model and a synthetic CPU host file for the planner's tests: every table constant (GEMMs at
// `gemm` GFLOP/s forward and backward, attention at `attention`, every element-wise kernel at
// `mem` GB/s, AdamW at `adamw` ns per parameter), so a step's time has a closed form; collectives
// of `comm_us` microseconds at 1 MiB and twice that at 2 MiB (2 ranks measured).
#pragma once
#include <string>

#include <fmt/format.h>

#include "config/model_config.h"  // ModelConfig

namespace ms::testing {

// A two-layer GPT small enough to build in a test.
inline ModelConfig small_plan_model() {
  ModelConfig m;
  m.n_layer = 2, m.n_embd = 64, m.n_head = 2, m.vocab_size = 128, m.max_seq_len = 128;
  return m;
}

inline std::string host_toml(double gemm, double attention, double mem, double adamw, double comm_us, int cores = 2) {
  const std::string g8 = fmt::format("[{0}, {0}, {0}, {0}, {0}, {0}, {0}, {0}]", gemm);
  std::string t;
  for (int th : {1, cores}) {
    if (th == 1 && cores == 1) continue;
    t += fmt::format(
        "[host.t{}]\ngemm_fp32_fwd = {}\ngemm_fp32_bwd = {}\ngemm_bf16_fwd = {}\ngemm_bf16_bwd = {}\n"
        "attention_fp32_fwd = [{a}, {a}]\nattention_fp32_bwd = [{a}, {a}]\n"
        "attention_bf16_fwd = [{a}, {a}]\nattention_bf16_bwd = [{a}, {a}]\n"
        "layernorm_fwd_GBps = {m}\nlayernorm_bwd_GBps = {m}\ngelu_fwd_GBps = {m}\ngelu_bwd_GBps = {m}\n"
        "cross_entropy_GBps = {m}\nstream_GBps = {m}\nadamw_ns_per_param = {o}\nlamb_ns_per_param = {o}\n",
        th, g8, g8, g8, g8, fmt::arg("a", attention), fmt::arg("m", mem), fmt::arg("o", adamw));
  }
  const std::string op =
      fmt::format("{{ ranks = 2, bytes = [1048576, 2097152], us = [{}, {}] }}", comm_us, 2 * comm_us);
  return fmt::format(
      "[device]\nkind = \"cpu\"\nname = \"test host\"\npeak_tflops = {{ fp32 = 1.0, bf16 = 2.0 }}\n"
      "memory_gib = 16\nmemory_GBps = {m}\ncores = {c}\ncomm_engine = \"cores\"\n"
      "[node]\ndevices_per_node = 2\nintra_GBps = 1\nintra_latency_us = 10\n"
      "[network]\nnics_per_node = 1\nnic_Gbps = 8\ninter_latency_us = 10\nhosts_per_switch = 1\n"
      "[host]\nthreads = [{t}]\ngemm_dims = [64, 256]\nattention_seq = [128, 256]\n"
      "process_floor_mib = 200\nrank_floor_mib = 220\n{tables}"
      "[comm.gloo]\nall_gather = {op}\nreduce_scatter = {op}\nall_reduce = {op}\n",
      fmt::arg("m", mem), fmt::arg("c", cores), fmt::arg("t", cores == 1 ? "1" : fmt::format("1, {}", cores)),
      fmt::arg("tables", t), fmt::arg("op", op));
}

}  // namespace ms::testing
