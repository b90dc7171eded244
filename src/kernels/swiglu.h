// swiglu: the gated MLP activation of Llama-style decoders (Shazeer 2020), out = silu(gate) * up
// with silu(x) = x * sigmoid(x), on the fc GEMM's output pre (N, 2F) whose rows are [gate (F) | up (F)]
// (the gate and up projections stacked as one GEMM; biases, when the model has them, are added by
// that GEMM). sigmoid uses the vectorised exp of the fused kernels (<= 1.4 ulp).
// Guarantees: every element is computed independently (bit-identical for any thread count);
// AVX-512 when the CPU has it (MS_KERNEL_ISA=generic forces the baseline path); no allocation.
#pragma once
#include "base/bf16.h"  // bf16_t

namespace ms {

// out (N,F) = silu(pre[:, :F]) * pre[:, F:].
void swiglu_forward(float* out, const float* pre, int N, int F);
// The same, written straight as bf16 (round to nearest even) for the bf16 GEMM that consumes it.
void swiglu_forward_bf16(bf16_t* out, const float* pre, int N, int F);

// dpre (N,2F) = [dout * up * silu'(gate) | dout * silu(gate)] (OVERWRITTEN; must not alias dout or pre).
void swiglu_backward(float* dpre, const float* dout, const float* pre, int N, int F);

}  // namespace ms
