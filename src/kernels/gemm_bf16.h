// gemm_bf16: bf16-input, fp32-output GEMMs through oneDNN's matmul primitive (AMX-BF16 brgemm
// kernels on CPUs that have them; oneDNN's slower bf16 emulation elsewhere), and the linear
// layer's forward/backward built on them, mirroring matmul.h.
// Guarantees: products are exact in fp32 (bf16 x bf16 fits), accumulation is fp32; a primitive is
// created once per (shape, transposes, bias, accumulate, OpenMP thread count) and calling thread,
// and cached for the thread's life (no primitive creation on the hot path after the first step;
// threads never share one, so several may call at once); the bias is fused into the GEMM
// (post-GEMM add in fp32); accumulation uses oneDNN's sum post-op (dst = A@B + bias + dst).
// Results are deterministic for a given thread count. Any x86-64 CPU works (see bf16_gemm_isa).
#pragma once
#include "base/bf16.h"  // bf16_t

namespace ms {

// C (M,N), row-major fp32 = op(A) @ op(B) [+ bias (N), broadcast over rows] [+ C if accumulate].
// op(A) is (M,K): A is stored row-major (M,K), or (K,M) with transA. op(B) is (K,N): B is stored
// (K,N), or (N,K) with transB. bias may be nullptr.
void gemm_bf16(bool transA, bool transB, int M, int N, int K, const bf16_t* A, const bf16_t* B,
               const float* bias, float* C, bool accumulate);

// The linear layer (PyTorch nn.Linear layout, weight (OC,C)) with bf16 operands:
// out (N,OC) = inp (N,C) @ weight^T + bias (OC, may be nullptr); accumulate: out += ...
void matmul_forward_bf16(float* out, const bf16_t* inp, const bf16_t* weight, const float* bias,
                         int N, int C, int OC, bool accumulate = false);

// dout (N,OC) fp32 is converted into dout_bf16 (scratch of N*OC), then
// dweight (OC,C) += dout^T @ inp (fp32 accumulation into the fp32 gradient);
// dbias (OC) += column sums of the fp32 dout (if non-null; deterministic, as matmul_backward);
// dinp (N,C) = dout @ weight (accumulate_dinp: +=), skipped when dinp is nullptr.
void matmul_backward_bf16(float* dinp, float* dweight, float* dbias, const float* dout,
                          bf16_t* dout_bf16, const bf16_t* inp, const bf16_t* weight, int N,
                          int C, int OC, bool accumulate_dinp);

// The same with the output gradient already in bf16 (no fp32 dout, no bias gradient).
void matmul_backward_bf16_from_bf16(float* dinp, float* dweight, const bf16_t* dout_bf16, const bf16_t* inp,
                                    const bf16_t* weight, int N, int C, int OC, bool accumulate_dinp);

// Number of the calling thread's cached oneDNN primitives (for tests: stays constant after the first step).
int gemm_bf16_cached_primitives();

// What oneDNN will run bf16 GEMMs on, from its effective ISA (the CPU, limited by
// ONEDNN_MAX_CPU_ISA): "AMX-BF16" (fast), "AVX-512 BF16", AVX-512 with oneDNN's bf16 emulation,
// or, below AVX-512 (no oneDNN bf16 matmul), bf16 operands widened exactly to fp32 for sgemm.
const char* bf16_gemm_isa();
bool bf16_gemm_uses_amx();

}  // namespace ms
