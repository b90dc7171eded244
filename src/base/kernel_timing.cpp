// kernel_timing.cpp: see kernel_timing.h.
#include "base/kernel_timing.h"

#include <atomic>

#include "base/clock.h"  // steady_ns

namespace ms {

namespace kernel_timing_detail {
std::atomic<bool> g_on{false};
}  // namespace kernel_timing_detail

namespace {

std::atomic<int64_t> g_ns[kNumKernels];
thread_local KernelTimeScope* t_current = nullptr;  // innermost open (timed) scope of this thread

void charge(KernelId id, int64_t ns) {
  g_ns[static_cast<int>(id)].fetch_add(ns, std::memory_order_relaxed);
}

}  // namespace

const char* kernel_name(KernelId id) {
  switch (id) {
    case KernelId::kGemmFp32: return "gemm_fp32";
    case KernelId::kGemmBf16: return "gemm_bf16";
    case KernelId::kBias: return "bias";
    case KernelId::kAttentionForward: return "attention_fwd";
    case KernelId::kAttentionBackward: return "attention_bwd";
    case KernelId::kLayerNormForward: return "layernorm_fwd";
    case KernelId::kLayerNormBackward: return "layernorm_bwd";
    case KernelId::kGeluForward: return "gelu_fwd";
    case KernelId::kGeluBackward: return "gelu_bwd";
    case KernelId::kCrossEntropy: return "cross_entropy";
    case KernelId::kBf16Convert: return "bf16_convert";
    case KernelId::kOptimizer: return "optimizer";
    case KernelId::kGradNorm: return "grad_norm";
    case KernelId::kCount: break;
  }
  return "?";
}

void set_kernel_timing(bool on) { kernel_timing_detail::g_on.store(on, std::memory_order_relaxed); }

double kernel_seconds(KernelId id) {
  const int i = static_cast<int>(id);
  return i >= 0 && i < kNumKernels ? 1e-9 * static_cast<double>(g_ns[i].load(std::memory_order_relaxed)) : 0.0;
}

void reset_kernel_seconds() {
  for (auto& n : g_ns) n.store(0, std::memory_order_relaxed);
}

void KernelTimeScope::begin(KernelId id) {
  const int64_t t = steady_ns();
  id_ = id;
  parent_ = t_current;
  if (parent_) charge(parent_->id_, t - parent_->t0_ns_);  // the outer scope pauses here
  t0_ns_ = t;
  t_current = this;
}

void KernelTimeScope::end() {
  const int64_t t = steady_ns();
  charge(id_, t - t0_ns_);
  t_current = parent_;
  if (parent_) parent_->t0_ns_ = t;  // and resumes here
}

}  // namespace ms
