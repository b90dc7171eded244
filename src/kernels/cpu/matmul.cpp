// matmul.cpp: oneDNN-backed GEMMs for the linear layers (see matmul.h).
#include "kernels/matmul.h"

#include <oneapi/dnnl/dnnl.h>  // dnnl_sgemm

#include <algorithm>  // std::max
#include <vector>

#include "base/check.h"          // MS_CHECK
#include "base/kernel_timing.h"  // KernelTimeScope

namespace ms {

void sgemm(bool transA, bool transB, int M, int N, int K, float alpha, const float* A, int lda,
           const float* B, int ldb, float beta, float* C, int ldc) {
  KernelTimeScope timed(KernelId::kGemmFp32);  // one branch when timing is off (base/kernel_timing.h)
  dnnl_status_t st = dnnl_sgemm(transA ? 'T' : 'N', transB ? 'T' : 'N', M, N, K, alpha, A, lda,
                                B, ldb, beta, C, ldc);
  MS_CHECK(st == dnnl_success, "dnnl_sgemm(M={}, N={}, K={}) failed with status {}", M, N, K, static_cast<int>(st));
}

void add_column_sums(float* out, const float* x, int N, int C) {
  KernelTimeScope timed(KernelId::kBias);
  // Parallel over column blocks; each column is summed over rows in a fixed order.
  constexpr int kBlock = 64;
  int nblocks = (C + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static)
  for (int b = 0; b < nblocks; b++) {
    int c0 = b * kBlock, c1 = std::min(C, c0 + kBlock);
    float acc[kBlock] = {0};
    for (int n = 0; n < N; n++) {
      const float* row = x + static_cast<size_t>(n) * C;
#pragma omp simd
      for (int c = c0; c < c1; c++) acc[c - c0] += row[c];
    }
    for (int c = c0; c < c1; c++) out[c] += acc[c - c0];
  }
}

void matmul_forward(float* out, const float* inp, const float* weight, const float* bias,
                    int N, int C, int OC, bool accumulate) {
  sgemm(false, true, N, OC, C, 1.0f, inp, C, weight, C, accumulate ? 1.0f : 0.0f, out, OC);
  if (bias) {
    KernelTimeScope timed(KernelId::kBias);
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
      float* row = out + static_cast<size_t>(n) * OC;
#pragma omp simd
      for (int o = 0; o < OC; o++) row[o] += bias[o];
    }
  }
}

void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                     const float* inp, const float* weight, int N, int C, int OC,
                     bool accumulate_dinp) {
  if (dinp) sgemm(false, false, N, C, OC, 1.0f, dout, OC, weight, C, accumulate_dinp ? 1.0f : 0.0f, dinp, C);
  sgemm(true, false, OC, C, N, 1.0f, dout, OC, inp, C, 1.0f, dweight, C);
  if (dbias) add_column_sums(dbias, dout, N, OC);
}

}  // namespace ms
