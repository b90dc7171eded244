// gemm.cu: cuda_kernels.h's GEMMs through cuBLASLt.
// Row-major C (M,N) = op(A) op(B) is, for column-major cuBLASLt, C^T (N,M) = op(B)^T op(A)^T: its
// first operand is our B, its second our A, m = N, n = M, k = K. Compute type CUBLAS_COMPUTE_32F
// (fp32 in and out: true fp32, no TF32; bf16 in: fp32 accumulation), scale type fp32, output
// fp32. A plan per (shape, transposes, dtype, bias, accumulate, pointer alignments) is built once
// and cached with the heuristic's first algorithm. The bias is the BIAS epilogue, or, where
// cuBLASLt offers no algorithm with it for a shape, a separate add after the GEMM.
#include <cublasLt.h>

#include <map>
#include <tuple>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda_kernels.h"

#define MS_CUBLAS_CHECK(call)                                                                  \
  do {                                                                                         \
    const cublasStatus_t ms_cublas_st_ = (call);                                               \
    if (ms_cublas_st_ != CUBLAS_STATUS_SUCCESS)                                                \
      ::ms::device_call_failed(__FILE__, __LINE__, #call, static_cast<int>(ms_cublas_st_),     \
                               cublasLtGetStatusString(ms_cublas_st_));                          \
  } while (0)

namespace ms::cuda {
namespace {
using detail::st;
constexpr size_t kWorkspace = 32u << 20;  // cuBLASLt's Hopper kernels want up to 32 MiB

cublasLtHandle_t handle() {
  static cublasLtHandle_t h = [] {
    require_device(Device::kCuda);
    cublasLtHandle_t x = nullptr;
    MS_CUBLAS_CHECK(cublasLtCreate(&x));
    return x;
  }();
  return h;
}

int alignment(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  int al = 256;
  while (al > 1 && (a % al) != 0) al >>= 1;
  return al;
}

using Key = std::tuple<bool, bool, int, int, int, bool, bool, bool, int, int, int, int>;
struct Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool bias_epilogue = false;
};
std::map<Key, Plan>& plans() {
  static std::map<Key, Plan> p;
  return p;
}

bool pick_algo(Plan& p, int al_a, int al_b, int al_c, int al_bias, bool with_bias) {
  cublasLtMatmulPreference_t pref = nullptr;
  MS_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const size_t ws = kWorkspace;
  MS_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  const uint32_t aa = al_a, ab = al_b, ac = al_c;
  MS_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &aa, sizeof(aa)));
  MS_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &ab, sizeof(ab)));
  MS_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &ac, sizeof(ac)));
  MS_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &ac, sizeof(ac)));
  const cublasLtEpilogue_t epi = with_bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
  MS_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
  (void)al_bias;
  cublasLtMatmulHeuristicResult_t res{};
  int found = 0;
  const cublasStatus_t stt = cublasLtMatmulAlgoGetHeuristic(handle(), p.op, p.a, p.b, p.c, p.c, pref, 1, &res, &found);
  MS_CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(pref));
  if (stt != CUBLAS_STATUS_SUCCESS || found == 0) return false;
  p.algo = res.algo;
  p.bias_epilogue = with_bias;
  return true;
}

const Plan& plan(bool ta, bool tb, int M, int N, int K, bool bf16, bool bias, bool acc,
                 const void* A, const void* B, const void* bias_p, const float* C) {
  const Key key{ta, tb, M, N, K, bf16, bias, acc, alignment(A), alignment(B), alignment(C), bias ? alignment(bias_p) : 0};
  auto it = plans().find(key);
  if (it != plans().end()) return it->second;
  Plan p;
  const cudaDataType_t in = bf16 ? CUDA_R_16BF : CUDA_R_32F;
  MS_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t opa = tb ? CUBLAS_OP_T : CUBLAS_OP_N;  // cuBLASLt's A is our B
  const cublasOperation_t opb = ta ? CUBLAS_OP_T : CUBLAS_OP_N;  // cuBLASLt's B is our A
  MS_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof(opa)));
  MS_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof(opb)));
  const cudaDataType_t bias_type = CUDA_R_32F;  // the bias is fp32 for both input types
  MS_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof(bias_type)));
  // Our B: (K,N) row-major = column-major N x K (ld N); transposed, (N,K) = column-major K x N (ld K).
  if (tb) MS_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.a, in, K, N, K));
  else MS_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.a, in, N, K, N));
  // Our A: (M,K) row-major = column-major K x M (ld K); transposed, (K,M) = column-major M x K (ld M).
  if (ta) MS_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.b, in, M, K, M));
  else MS_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.b, in, K, M, K));
  MS_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.c, CUDA_R_32F, N, M, N));
  const int al_a = alignment(B), al_b = alignment(A), al_c = alignment(C);
  const int al_bias = bias ? alignment(bias_p) : 0;
  if (!(bias && pick_algo(p, al_a, al_b, al_c, al_bias, true)) && !pick_algo(p, al_a, al_b, al_c, al_bias, false))
    device_call_failed(__FILE__, __LINE__, "cublasLtMatmulAlgoGetHeuristic", 0,
                       "no cuBLASLt algorithm for this GEMM shape");
  return plans().emplace(key, p).first->second;
}

__global__ void add_bias_kernel(float* C, const float* bias, int M, int N) {
  const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < static_cast<size_t>(M) * N) C[i] += bias[i % N];
}

void gemm(bool ta, bool tb, int M, int N, int K, const void* A, const void* B, bool bf16,
          const float* bias, float* C, bool acc, Stream s) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0) {  // an empty product: C = bias (+ C)
    if (!acc) MS_CUDA_CHECK(cudaMemsetAsync(C, 0, sizeof(float) * static_cast<size_t>(M) * N, st(s)));
    if (bias) add_bias_kernel<<<detail::blocks_for(static_cast<size_t>(M) * N, 256), 256, 0, st(s)>>>(C, bias, M, N);
    MS_CUDA_CHECK_LAUNCH();
    return;
  }
  const Plan& p = plan(ta, tb, M, N, K, bf16, bias != nullptr, acc, A, B, bias, C);
  if (p.bias_epilogue)
    MS_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
  const float alpha = 1.f, beta = acc ? 1.f : 0.f;
  void* ws = detail::scratch(detail::Slot::kGemmWorkspace, kWorkspace);
  MS_CUBLAS_CHECK(cublasLtMatmul(handle(), p.op, &alpha, B, p.a, A, p.b, &beta, C, p.c, C, p.c, &p.algo,
                                 ws, kWorkspace, st(s)));
  if (bias && !p.bias_epilogue) {
    add_bias_kernel<<<detail::blocks_for(static_cast<size_t>(M) * N, 256), 256, 0, st(s)>>>(C, bias, M, N);
    MS_CUDA_CHECK_LAUNCH();
  }
}
}  // namespace

int gemm_cached_plans() { return static_cast<int>(plans().size()); }

void gemm_f32(bool transA, bool transB, int M, int N, int K, const float* A, const float* B,
              const float* bias, float* C, bool accumulate, Stream s) {
  gemm(transA, transB, M, N, K, A, B, false, bias, C, accumulate, s);
}
void gemm_bf16(bool transA, bool transB, int M, int N, int K, const bf16_t* A, const bf16_t* B,
               const float* bias, float* C, bool accumulate, Stream s) {
  gemm(transA, transB, M, N, K, A, B, true, bias, C, accumulate, s);
}

void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int N,
                    int C, int OC, bool accumulate, Stream s) {
  gemm_f32(false, true, N, OC, C, inp, weight, bias, out, accumulate, s);
}
void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int N, int C, int OC, bool accumulate_dinp, Stream s) {
  if (dinp) gemm_f32(false, false, N, C, OC, dout, weight, nullptr, dinp, accumulate_dinp, s);
  if (dweight) gemm_f32(true, false, OC, C, N, dout, inp, nullptr, dweight, true, s);
  if (dbias) add_column_sums(dbias, dout, N, OC, s);
}
void matmul_forward_bf16(float* out, const bf16_t* inp, const bf16_t* weight, const float* bias,
                         int N, int C, int OC, bool accumulate, Stream s) {
  gemm_bf16(false, true, N, OC, C, inp, weight, bias, out, accumulate, s);
}
void matmul_backward_bf16_from_bf16(float* dinp, float* dweight, const bf16_t* dout_bf16,
                                    const bf16_t* inp, const bf16_t* weight, int N, int C, int OC,
                                    bool accumulate_dinp, Stream s) {
  if (dinp) gemm_bf16(false, false, N, C, OC, dout_bf16, weight, nullptr, dinp, accumulate_dinp, s);
  if (dweight) gemm_bf16(true, false, OC, C, N, dout_bf16, inp, nullptr, dweight, true, s);
}
void matmul_backward_bf16(float* dinp, float* dweight, float* dbias, const float* dout,
                          bf16_t* dout_bf16, const bf16_t* inp, const bf16_t* weight, int N, int C,
                          int OC, bool accumulate_dinp, Stream s) {
  f32_to_bf16(dout_bf16, dout, static_cast<size_t>(N) * OC, s);
  matmul_backward_bf16_from_bf16(dinp, dweight, dout_bf16, inp, weight, N, C, OC, accumulate_dinp, s);
  if (dbias) add_column_sums(dbias, dout, N, OC, s);
}

}  // namespace ms::cuda
