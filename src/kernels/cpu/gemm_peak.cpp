// gemm_peak.cpp: see gemm_peak.h.
#include "kernels/gemm_peak.h"

#include <algorithm>  // std::max
#include <functional>
#include <vector>

#include "base/bf16.h"          // bf16_t, f32_to_bf16_rne
#include "base/clock.h"         // Stopwatch
#include "kernels/gemm_bf16.h"  // gemm_bf16
#include "kernels/matmul.h"     // sgemm

namespace ms {

namespace {

constexpr int kM = 1024, kK = 768, kN = 3072;

// Best GFLOP/s of gemm() over 7 timed runs; the first run warms up (and creates primitives).
double best_gflops(const std::function<void()>& gemm) {
  double best = 0;
  for (int rep = 0; rep < 8; rep++) {
    const Stopwatch watch;
    gemm();
    const double s = watch.seconds();
    if (rep > 0) best = std::max(best, 2.0 * kM * kN * kK / s / 1e9);
  }
  return best;
}

}  // namespace

double measure_sgemm_peak_gflops() {
  std::vector<float> a(static_cast<size_t>(kM) * kK, 0.01f), b(static_cast<size_t>(kK) * kN, 0.02f),
      c(static_cast<size_t>(kM) * kN);
  return best_gflops([&] { sgemm(false, false, kM, kN, kK, 1.0f, a.data(), kK, b.data(), kN, 0.0f, c.data(), kN); });
}

double measure_bf16_gemm_peak_gflops() {
  std::vector<bf16_t> a(static_cast<size_t>(kM) * kK, f32_to_bf16_rne(0.01f)),
      b(static_cast<size_t>(kK) * kN, f32_to_bf16_rne(0.02f));
  std::vector<float> c(static_cast<size_t>(kM) * kN);
  return best_gflops([&] { gemm_bf16(false, false, kM, kN, kK, a.data(), b.data(), nullptr, c.data(), false); });
}

}  // namespace ms
