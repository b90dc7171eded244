// bf16_weight_cache: the bf16 copy of the fp32 master weights that bf16 GEMMs read (same offsets as
// the parameter buffer). It is refreshed at most once per optimizer step: whoever writes the master
// weights marks it stale; the next forward converts it, whole or range by range as a data-parallel
// wrapper delivers the weights; an optimizer that writes the copy in its own pass marks it fresh.
#pragma once
#include <cstddef>

#include "base/bf16.h"          // bf16_t
#include "base/device_array.h"  // DeviceArray

namespace ms {

class KernelBackend;

class Bf16WeightCache {
 public:
  // n elements on k's device, converted by k.
  void resize(size_t n, KernelBackend& k);
  bool empty() const { return copy_.size() == 0; }
  bool stale() const { return stale_; }
  void mark_stale() { stale_ = true; }
  void mark_fresh() { stale_ = false; }
  // Converts master[lo, hi) into the copy (does not change the stale flag).
  void convert_range(const float* master, size_t lo, size_t hi);
  // Converts all of master (copy size elements) and marks the copy fresh.
  void refresh(const float* master);
  bf16_t* data() { return copy_.data(); }
  const bf16_t* data() const { return copy_.data(); }

 private:
  DeviceArray<bf16_t> copy_;
  KernelBackend* k_ = nullptr;
  bool stale_ = true;
};

}  // namespace ms
