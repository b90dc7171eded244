// matmul: the linear layer's GEMMs, through oneDNN's sgemm (measured faster than OpenBLAS here,
// see docs/performance.md; one threading runtime, OpenMP, throughout).
// Weight layout is PyTorch nn.Linear's: weight (OC, C), so out = inp @ weight^T + bias.
// Guarantees: bias reductions are deterministic (fixed order, independent of thread count).
#pragma once

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

}  // namespace ms
