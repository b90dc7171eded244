// kernel_timing: where a training step's time goes, per compute kernel, for benchmarks (bench_train's
// per-kernel table). Each kernel's public entry function opens a KernelTimeScope naming its KernelId.
// Off by default: a scope then costs one well-predicted branch and no clock read. When on, a scope
// charges its EXCLUSIVE wall time to its kernel: a scope opened inside another (bf16 conversion inside
// a bf16 linear layer, a GEMM inside a kernel) pauses the outer one, so the per-kernel seconds never
// count a nanosecond twice and their sum is at most the wall time of the timed code.
// Threads: the innermost open scope is tracked per thread (kernels are entered from the thread that
// runs the step; their OpenMP threads only work inside them) and the totals are atomic, so a scope on
// another thread is safe (its time adds up, concurrently with the main thread's).
#pragma once
#include <atomic>
#include <cstdint>

namespace ms {

// The kernels that are timed. Names (kernel_name) are the keys of bench_train's "kernel_ms".
enum class KernelId : int {
  kGemmFp32,           // ms::sgemm (fp32 GEMMs)
  kGemmBf16,           // gemm_bf16 (bf16 GEMMs, incl. a fused bias; on CPUs without a oneDNN bf16 matmul
                       // also the widened fp32 product)
  kBias,               // a linear layer's bias add and bias gradient (column sums) outside the GEMM
  kAttentionForward,   // attention.h forward
  kAttentionBackward,  // attention.h backward
  kLayerNormForward,
  kLayerNormBackward,
  kGeluForward,        // bias + GeLU
  kGeluBackward,
  kCrossEntropy,       // fused softmax + cross-entropy, and its vocab-parallel phases
  kBf16Convert,        // array conversions fp32 <-> bf16 (bf16_convert.h)
  kOptimizer,          // AdamW / LAMB update
  kGradNorm,           // gradient sum of squares, clipping scale, finiteness check
  kCount
};
inline constexpr int kNumKernels = static_cast<int>(KernelId::kCount);

// "gemm_fp32", "gemm_bf16", "bias", "attention_fwd", "attention_bwd", "layernorm_fwd", "layernorm_bwd",
// "gelu_fwd", "gelu_bwd", "cross_entropy", "bf16_convert", "optimizer", "grad_norm".
const char* kernel_name(KernelId id);

// Process-wide switch (off at start). Switch it between steps, not inside a timed kernel.
void set_kernel_timing(bool on);
// Seconds charged to each kernel since the last reset (exclusive time, see above).
double kernel_seconds(KernelId id);
void reset_kernel_seconds();

namespace kernel_timing_detail {
extern std::atomic<bool> g_on;  // relaxed: a plain load on x86
}  // namespace kernel_timing_detail

inline bool kernel_timing_enabled() { return kernel_timing_detail::g_on.load(std::memory_order_relaxed); }

// RAII: charges its lifetime, less that of scopes nested inside it, to its kernel when timing is on.
class KernelTimeScope {
 public:
  explicit KernelTimeScope(KernelId id) : on_(kernel_timing_enabled()) {
    if (on_) begin(id);
  }
  ~KernelTimeScope() {
    if (on_) end();
  }
  KernelTimeScope(const KernelTimeScope&) = delete;
  KernelTimeScope& operator=(const KernelTimeScope&) = delete;

 private:
  void begin(KernelId id);
  void end();
  bool on_;
  KernelId id_ = KernelId::kCount;
  KernelTimeScope* parent_ = nullptr;  // the scope this one interrupts (same thread), or nullptr
  int64_t t0_ns_ = 0;                  // start of the current uninterrupted stretch
};

}  // namespace ms
