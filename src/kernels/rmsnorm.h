// rmsnorm: RMSNorm over the last dimension (Zhang & Sennrich 2019; Hugging Face's LlamaRMSNorm
// computed in fp32): out = inp * rstd * weight with rstd = 1 / sqrt(mean(inp^2) + eps), forward
// and backward, parallel over rows with OpenMP.
// Guarantees: as layernorm.h: bit-identical results for any number of OpenMP threads (the dweight
// reduction sums fixed 32-row chunks in order), AVX-512 when the CPU has it (MS_KERNEL_ISA=generic
// forces the baseline path), no heap allocation after the first call.
#pragma once

namespace ms {

// out (N,C) = inp * rstd * weight per row; rstd (N) is saved for backward.
void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int N, int C, float eps);

// ACCUMULATES (+=) into dinp (N,C) and dweight (C), given dout (N,C) and the forward's inp,
// weight and rstd: dinp += rstd * (w*dout - x * rstd^2 * mean(w*dout*x)).
void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                      const float* rstd, int N, int C);

}  // namespace ms
