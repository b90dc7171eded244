// bf16_weight_cache.cpp: see bf16_weight_cache.h.
#include "model/bf16_weight_cache.h"

#include "kernels/bf16_convert.h"  // f32_to_bf16

namespace ms {

void Bf16WeightCache::convert_range(const float* master, size_t lo, size_t hi) {
  f32_to_bf16(copy_.data() + lo, master + lo, hi - lo);
}

void Bf16WeightCache::refresh(const float* master) {
  f32_to_bf16(copy_.data(), master, copy_.size());
  stale_ = false;
}

}  // namespace ms
