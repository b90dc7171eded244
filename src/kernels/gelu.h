// gelu: fused bias + GPT-2's tanh-approximate GeLU (PyTorch nn.GELU(approximate="tanh")),
// gelu(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), computed in the equivalent and
// cancellation-free form x * sigmoid(2 sqrt(2/pi) (x + 0.044715 x^3)) with a vectorised exp.
// Guarantees: bit-identical results for any number of OpenMP threads (the dbias reduction sums
// fixed 32-row chunks in order). AVX-512 when available (MS_KERNEL_ISA=generic forces the
// baseline path, see attention.h). No heap allocation after the first call.
#pragma once
#include "base/bf16.h"  // bf16_t

namespace ms {

// pre (N,C) holds x @ W^T on entry; adds bias in place (pre += bias, kept for the backward) and
// writes out = gelu(pre). bias may be nullptr (nothing added). out must not alias pre.
void bias_gelu_forward(float* out, float* pre, const float* bias, int N, int C);

// The same, writing the GeLU output straight as bf16 (round to nearest even, exact: bf16.h
// f32_to_bf16_rne) for a bf16 GEMM that consumes it: no fp32 output pass.
void bias_gelu_forward_bf16(bf16_t* out, float* pre, const float* bias, int N, int C);

// dpre = dout * gelu'(pre) (OVERWRITES dpre; dpre may alias dout); dbias (C) += column sums of
// dpre (dbias may be nullptr).
void bias_gelu_backward(float* dpre, float* dbias, const float* dout, const float* pre, int N, int C);

}  // namespace ms
