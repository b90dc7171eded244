// bf16_weight_cache.cpp: see bf16_weight_cache.h.
#include "model/bf16_weight_cache.h"

#include "kernels/backend.h"  // KernelBackend

namespace ms {

void Bf16WeightCache::resize(size_t n, KernelBackend& k) {
  k_ = &k;
  copy_.resize(n, k.device());
}

void Bf16WeightCache::convert_range(const float* master, size_t lo, size_t hi) {
  k_->f32_to_bf16(copy_.data() + lo, master + lo, hi - lo);
}

void Bf16WeightCache::refresh(const float* master) {
  k_->f32_to_bf16(copy_.data(), master, copy_.size());
  stale_ = false;
}

}  // namespace ms
