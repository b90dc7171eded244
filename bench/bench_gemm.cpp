// bench_gemm: fp32 GEMM throughput of oneDNN's sgemm on the shapes of a GPT-2 training step
// (forward, input-gradient and weight-gradient GEMMs of each linear layer and the LM head), with
// OpenBLAS's cblas_sgemm beside it when libopenblas is installed (loaded at run time, so the
// project never links a second threading runtime). Prints GFLOP/s per shape, best of 5 runs.
// Usage: bench_gemm [N=1024 rows] [C=768]
#include <dlfcn.h>  // dlopen, dlsym

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include <CLI/CLI.hpp>

#include "kernels/matmul.h"  // ms::sgemm
#include "base/clock.h"  // Stopwatch

namespace {

using CblasSgemm = void (*)(int, int, int, int, int, int, float, const float*, int, const float*, int,
                            float, float*, int);
constexpr int kRowMajor = 101, kNoTrans = 111, kTrans = 112;

template <class F>
double best_gflops(F&& run, double flops) {
  double best = 0;
  for (int r = 0; r < 6; r++) {
    const ms::Stopwatch watch;
    run();
    double s = watch.seconds();
    if (r > 0) best = std::max(best, flops / s / 1e9);
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  int N = 1024, C = 768;
  CLI::App app{"bench_gemm: fp32 GEMM throughput (oneDNN, and OpenBLAS when installed) on GPT-2 step shapes"};
  app.add_option("N", N, "rows (B*T)")->check(CLI::Range(1, 1 << 20))->capture_default_str();
  app.add_option("C", C, "model width")->check(CLI::Range(1, 1 << 16))->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  CblasSgemm openblas = nullptr;
  if (void* h = dlopen("libopenblas.so.0", RTLD_NOW | RTLD_LOCAL))
    openblas = reinterpret_cast<CblasSgemm>(dlsym(h, "cblas_sgemm"));
  struct Shape { const char* name; bool ta, tb; int M, Nn, K; };
  const Shape shapes[] = {
      {"qkv fwd   (N,C)x(3C,C)^T", false, true, N, 3 * C, C},
      {"fc fwd    (N,C)x(4C,C)^T", false, true, N, 4 * C, C},
      {"proj fwd  (N,4C)x(C,4C)^T", false, true, N, C, 4 * C},
      {"fc dinp   (N,4C)x(4C,C)", false, false, N, C, 4 * C},
      {"fc dW     (N,4C)^Tx(N,C)", true, false, 4 * C, C, N},
      {"lm head   (N,C)x(V,C)^T", false, true, N, 50304, C},
  };
  std::printf("%-28s %10s %10s\n", "shape", "oneDNN", openblas ? "OpenBLAS" : "(no OpenBLAS)");
  for (const Shape& s : shapes) {
    std::vector<float> a(static_cast<size_t>(s.M) * s.K, 0.01f), b(static_cast<size_t>(s.K) * s.Nn, 0.02f),
        c(static_cast<size_t>(s.M) * s.Nn);
    const int lda = s.ta ? s.M : s.K, ldb = s.tb ? s.K : s.Nn;
    const double flops = 2.0 * s.M * s.Nn * s.K;
    double dnnl = best_gflops([&] { ms::sgemm(s.ta, s.tb, s.M, s.Nn, s.K, 1.0f, a.data(), lda, b.data(), ldb, 0.0f, c.data(), s.Nn); }, flops);
    double ob = openblas ? best_gflops([&] {
      openblas(kRowMajor, s.ta ? kTrans : kNoTrans, s.tb ? kTrans : kNoTrans, s.M, s.Nn, s.K, 1.0f, a.data(), lda,
               b.data(), ldb, 0.0f, c.data(), s.Nn);
    }, flops) : 0;
    std::printf("%-28s %10.1f %10.1f\n", s.name, dnnl, ob);
  }
  return 0;
}
