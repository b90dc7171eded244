// tiny_training: the small training setup the allocation checks share (tests/train/test_no_alloc and
// its dp = 2 worker tests/tools/no_alloc_rank): a 2-layer model over a 300-token vocabulary, and a
// deterministic batch source (an LCG, seeded per rank) that allocates nothing once built.
#pragma once
#include <cstdint>
#include <functional>
#include <string>

#include "base/dtype.h"
#include "config/config.h"

namespace ms::testing {

inline Config tiny_training_config(const std::string& precision, const std::string& optimizer, int threads) {
  Config cfg;
  cfg.model.n_layer = 2; cfg.model.n_embd = 64; cfg.model.n_head = 4;
  cfg.model.vocab_size = 300; cfg.model.max_seq_len = 32;
  cfg.train.batch_size = 2; cfg.train.seq_len = 32; cfg.train.grad_accum = 2;
  cfg.train.steps = 10; cfg.train.precision = *dtype_from_name(precision);
  cfg.train.threads = threads;
  cfg.optim.name = *parse_config_enum<OptimizerKind>(optimizer);
  cfg.data.train = "unused";
  return cfg;
}

// next_micro_batch for Trainer::train_step: B*T inputs and targets below 300 from an LCG at seed.
inline std::function<void(int*, int*)> lcg_batches(const Config& cfg, uint64_t seed) {
  const int n = cfg.train.batch_size * cfg.train.seq_len;
  return [n, x = seed](int* in, int* tg) mutable {
    for (int i = 0; i < n; i++) {
      x = x * 6364136223846793005ULL + 1442695040888963407ULL;
      in[i] = static_cast<int>((x >> 33) % 300);
      tg[i] = static_cast<int>((x >> 17) % 300);
    }
  };
}

}  // namespace ms::testing
