// layernorm: LayerNorm over the last dimension (eps = 1e-5 unless given, biased variance, as PyTorch's
// nn.LayerNorm), forward and backward, parallel over rows with OpenMP.
// Guarantees: results are bit-identical for any number of OpenMP threads. The dweight/dbias
// reductions over rows use a fixed partition of the rows into 32-row chunks (a partial sum per
// chunk, then the chunks summed in order), independent of the thread count. AVX-512 is used when
// the CPU has it (MS_KERNEL_ISA=generic forces the baseline path, see attention.h). No heap
// allocation after the first call (the chunk partials live in per-thread scratch grown once).
#pragma once

namespace ms {

// out (N,C) = (inp - mean) * rstd * weight + bias per row; mean, rstd (N) are saved for backward.
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp,
                       const float* weight, const float* bias, int N, int C, float eps = 1e-5f);

// ACCUMULATES (+=) into dinp (N,C), dweight (C), dbias (C), given dout (N,C) and the forward's
// inp, weight, mean, rstd.
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean,
                        const float* rstd, int N, int C);

}  // namespace ms
