// bench_attention: times attention_forward / attention_backward (fp32) and their bf16 versions
// (attention_*_bf16: tile products on AVX512-BF16 where present) at GPT-2 small shapes, full causal
// versus a sliding window, and prints effective GFLOP/s (counting only unmasked score entries) and
// the bf16 / fp32 time ratio.
// Usage: bench_attention [B] [T] [window]   (defaults 4 1024 256; NH=12, C=768)
#include <chrono>
#include <ctime>
#include <cstdint>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "kernels/attention.h"
#include "base/clock.h"  // steady_seconds

namespace {
double now() { return ms::steady_seconds(); }
// Process CPU time (all threads): less sensitive than wall time to other processes on the machine.
double cpu_now() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec + 1e-9 * ts.tv_nsec;
}
// Number of (query, key) pairs attended: sum over t of min(t+1, W).
double pairs(int T, int W) {
  double n = 0;
  for (int t = 0; t < T; ++t) n += (W > 0 && W < t + 1) ? W : t + 1;
  return n;
}
}  // namespace

int main(int argc, char** argv) {
  int B = 4, T = 1024, W = 256;
  CLI::App app{"bench_attention: attention forward/backward, full causal versus a sliding window (NH=12, C=768)"};
  app.add_option("B", B, "batch size")->check(CLI::Range(1, 1 << 16))->capture_default_str();
  app.add_option("T", T, "sequence length")->check(CLI::Range(1, 1 << 20))->capture_default_str();
  app.add_option("window", W, "sliding window (0: full causal only)")->check(CLI::Range(0, 1 << 20))->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  const int NH = 12, C = 768, HS = C / NH;
  std::vector<float> qkv((size_t)B * T * 3 * C), out((size_t)B * T * C), lse((size_t)B * NH * T);
  std::vector<float> dout(out.size()), dqkv(qkv.size());
  uint64_t s = 42;
  auto rnd = [&] { s = s * 6364136223846793005ull + 1442695040888963407ull; return (float)((s >> 40) * 0x1p-24) - 0.5f; };
  for (auto& x : qkv) x = rnd();
  for (auto& x : dout) x = rnd();
  fmt::print("bf16 kernels on the dot-product units: {}\n", ms::attention_bf16_on_dot_product_units() ? "yes (AVX512-BF16)" : "no (fp32 fallback)");
  double fp32_f[2] = {0, 0}, fp32_b[2] = {0, 0};
  for (bool bf16 : {false, true}) {
  const auto fwd = bf16 ? ms::attention_forward_bf16 : ms::attention_forward;
  const auto bwd = bf16 ? ms::attention_backward_bf16 : ms::attention_backward;
  double full_f = 0, full_b = 0;
  for (int w : {0, W}) {
    const int reps = 3;
    fwd(out.data(), lse.data(), qkv.data(), B, T, C, NH, NH, w);  // warm-up
    double t0 = now(), c0 = cpu_now();
    for (int r = 0; r < reps; ++r) fwd(out.data(), lse.data(), qkv.data(), B, T, C, NH, NH, w);
    const double tf = (now() - t0) / reps, cf = (cpu_now() - c0) / reps;
    bwd(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), B, T, C, NH, NH, w);
    t0 = now();
    c0 = cpu_now();
    for (int r = 0; r < reps; ++r) bwd(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), B, T, C, NH, NH, w);
    const double tb = (now() - t0) / reps, cb = (cpu_now() - c0) / reps;
    const double np = pairs(T, w) * B * NH;
    if (w == 0) { full_f = cf; full_b = cb; }
    const int wi = w == 0 ? 0 : 1;
    if (!bf16) fp32_f[wi] = cf, fp32_b[wi] = cb;
    fmt::print("{} B={} T={} NH={} HS={} window={:4}: fwd {:7.2f} ms wall {:7.2f} ms cpu ({:5.1f} GFLOP/s wall)"
               "  bwd {:7.2f} ms wall {:7.2f} ms cpu ({:5.1f} GFLOP/s wall)\n"
               "    cpu time vs full: fwd {:.2f} bwd {:.2f}; attended pairs vs full {:.2f}\n",
               bf16 ? "bf16" : "fp32", B, T, NH, HS, w, tf * 1e3, cf * 1e3, 4.0 * HS * np / tf * 1e-9, tb * 1e3, cb * 1e3,
               8.0 * HS * np / tb * 1e-9, cf / full_f, cb / full_b, pairs(T, w) / pairs(T, 0));
    if (bf16) fmt::print("    bf16 / fp32 cpu time: fwd {:.2f} bwd {:.2f}\n", cf / fp32_f[wi], cb / fp32_b[wi]);
  }
  }
  return 0;
}
