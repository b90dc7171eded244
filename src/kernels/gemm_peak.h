// gemm_peak: the GEMM throughput this machine reaches, measured (GFLOP/s), for MFU against a
// measured ceiling (beside MFU against the hardware's peak). Shape: a GPT-2-small MLP GEMM at 1024
// rows, (1024 x 768) @ (768 x 3072); best of 7 timed runs after one warm-up (~0.2 s).
#pragma once

namespace ms {

// fp32, through ms::sgemm (oneDNN).
double measure_sgemm_peak_gflops();
// bf16 operands, fp32 accumulation, through gemm_bf16 (AMX or AVX512-BF16 where present).
double measure_bf16_gemm_peak_gflops();

}  // namespace ms
