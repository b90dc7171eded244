// matmul: the linear layer's GEMMs, through oneDNN's sgemm (measured faster than OpenBLAS here,
// see docs/performance.md; one threading runtime, OpenMP, throughout).
// Weight layout is PyTorch nn.Linear's: weight (OC, C), so out = inp @ weight^T + bias.
// Guarantees: bias reductions are deterministic (fixed order, independent of thread count).
#pragma once
#include <chrono>  // std::chrono::steady_clock (GemmTimeScope)

namespace ms {

// out (N,OC) = inp (N,C) @ weight(OC,C)^T + bias (OC, may be nullptr).
// accumulate: out += ... instead of out = ...
void matmul_forward(float* out, const float* inp, const float* weight, const float* bias,
                    int N, int C, int OC, bool accumulate = false);

// dweight (OC,C) += dout^T @ inp; dbias (OC) += column sums of dout (if non-null);
// dinp (N,C) = dout @ weight (accumulate_dinp: +=). dinp may be nullptr (not needed).
void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                     const float* inp, const float* weight, int N, int C, int OC,
                     bool accumulate_dinp);

// Raw row-major sgemm: C(M,N) = alpha * op(A) @ op(B) + beta * C, op = transpose when trans*.
void sgemm(bool transA, bool transB, int M, int N, int K, float alpha, const float* A, int lda,
           const float* B, int ldb, float beta, float* C, int ldc);

// Column sums of x (N,C) added into out (C); deterministic.
void add_column_sums(float* out, const float* x, int N, int C);

// Measures fp32 GEMM throughput (GFLOP/s) on square-ish shapes like a transformer's, best of a
// few runs (~0.2 s). Used as the MFU denominator.
double measure_sgemm_peak_gflops();

// ---- GEMM time accounting (benchmarks only) ----
// Off by default: each GEMM then pays one well-predicted branch and no clock read. When on, every
// ms::sgemm (and any other GEMM wrapped in a GemmTimeScope) adds its wall time (steady_clock) to
// one global counter. Not thread-safe: GEMMs are issued from the main thread (oneDNN threads inside).
void set_gemm_timing(bool on);
bool gemm_timing_enabled();
double gemm_seconds();      // seconds spent inside timed GEMMs since the last reset
void reset_gemm_seconds();
void add_gemm_seconds(double s);

// RAII: times its own lifetime into gemm_seconds() when timing is enabled.
class GemmTimeScope {
 public:
  GemmTimeScope() : on_(gemm_timing_enabled()) {
    if (on_) t0_ = std::chrono::steady_clock::now();
  }
  ~GemmTimeScope() {
    if (on_) add_gemm_seconds(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count());
  }
  GemmTimeScope(const GemmTimeScope&) = delete;
  GemmTimeScope& operator=(const GemmTimeScope&) = delete;

 private:
  bool on_;
  std::chrono::steady_clock::time_point t0_;
};

}  // namespace ms
