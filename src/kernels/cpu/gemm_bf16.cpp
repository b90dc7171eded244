// gemm_bf16.cpp: cached oneDNN bf16 matmul primitives (see gemm_bf16.h).
#include "kernels/gemm_bf16.h"

#include <omp.h>
#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>  // std::max
#include <map>
#include <mutex>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "base/aligned.h"  // AlignedBuffer
#include "base/check.h"    // MS_CHECK
#include "base/kernel_timing.h"  // KernelTimeScope
#include "kernels/bf16_convert.h"  // f32_to_bf16, bf16_to_f32
#include "kernels/matmul.h"   // add_column_sums

namespace ms {

namespace {

using dt = dnnl::memory::data_type;
using dims = dnnl::memory::dims;

struct Gemm {
  // oneDNN 2.6 has no bf16 matmul below AVX-512 (e.g. AVX2-only CPUs): then the operands are
  // widened to fp32 (exactly) and multiplied by sgemm, which gives the same bf16 math.
  bool widen = false;
  dnnl::matmul prim;
  dnnl::memory::desc a_md, b_md, bias_md, c_md;
  // Built once: memory objects re-pointed at each call's buffers (set_data_handle), the argument
  // map and a user scratchpad, so a call allocates nothing.
  dnnl::memory a, b, bias, c;
  AlignedBuffer<uint8_t> scratch;
  dnnl::memory scratchpad;
  std::vector<dnnl_exec_arg_t> args;  // for the C API: dnnl.hpp's execute() builds a vector per call
};

struct Cache {
  dnnl::engine eng{dnnl::engine::kind::cpu, 0};
  dnnl::stream strm{eng};
  std::mutex mu;
  // key: transA, transB, M, N, K, has bias, accumulate, OpenMP threads (oneDNN fixes a primitive's
  // partition over the threads when it is created)
  std::map<std::tuple<bool, bool, int, int, int, bool, bool, int>, Gemm> prims;
  AlignedBuffer<float> wide_a, wide_b;  // widened operands of the fallback (grown once)
};

// One cache per calling thread: a cached primitive's memory objects are re-pointed at each call's
// buffers, so two threads must not share them (the trainer calls from one thread; the planner's
// host calibration from several at once).
Cache& cache() {
  thread_local Cache c;
  return c;
}

Gemm make_gemm(const dnnl::engine& eng, bool transA, bool transB, int M, int N, int K,
               bool bias, bool accumulate) {
  Gemm g;
  // Row-major operands described by strides, so transposes need no copies.
  g.a_md = dnnl::memory::desc(dims{M, K}, dt::bf16, transA ? dims{1, M} : dims{K, 1});
  g.b_md = dnnl::memory::desc(dims{K, N}, dt::bf16, transB ? dims{1, K} : dims{N, 1});
  g.c_md = dnnl::memory::desc(dims{M, N}, dt::f32, dims{N, 1});
  if (bias) g.bias_md = dnnl::memory::desc(dims{1, N}, dt::f32, dims{N, 1});
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (accumulate) {
    dnnl::post_ops po;
    po.append_sum(1.0f);
    attr.set_post_ops(po);
  }
  dnnl::matmul::desc d = bias ? dnnl::matmul::desc(g.a_md, g.b_md, g.bias_md, g.c_md)
                              : dnnl::matmul::desc(g.a_md, g.b_md, g.c_md);
  dnnl::matmul::primitive_desc pd(d, attr, eng);
  g.prim = dnnl::matmul(pd);
  g.a = dnnl::memory(g.a_md, eng, nullptr);
  g.b = dnnl::memory(g.b_md, eng, nullptr);
  g.c = dnnl::memory(g.c_md, eng, nullptr);
  g.scratch.resize(std::max<size_t>(pd.scratchpad_desc().get_size(), 1));
  g.scratchpad = dnnl::memory(pd.scratchpad_desc(), eng, g.scratch.data());
  g.args = {{DNNL_ARG_SRC, g.a.get()}, {DNNL_ARG_WEIGHTS, g.b.get()}, {DNNL_ARG_DST, g.c.get()},
            {DNNL_ARG_SCRATCHPAD, g.scratchpad.get()}};
  if (bias) {
    g.bias = dnnl::memory(g.bias_md, eng, nullptr);
    g.args.push_back({DNNL_ARG_BIAS, g.bias.get()});
  }
  return g;
}

}  // namespace

void gemm_bf16(bool transA, bool transB, int M, int N, int K, const bf16_t* A, const bf16_t* B,
               const float* bias, float* C, bool accumulate) {
  MS_CHECK(M > 0 && N > 0 && K > 0, "gemm_bf16: bad shape M={} N={} K={}", M, N, K);
  KernelTimeScope timed(KernelId::kGemmBf16);  // one branch when timing is off (base/kernel_timing.h)
  Cache& c = cache();
  Gemm* g;
  {
    std::lock_guard<std::mutex> lock(c.mu);
    auto key = std::make_tuple(transA, transB, M, N, K, bias != nullptr, accumulate, omp_get_max_threads());
    auto it = c.prims.find(key);
    if (it == c.prims.end()) {
      Gemm made;
      try {
        made = make_gemm(c.eng, transA, transB, M, N, K, bias != nullptr, accumulate);
      } catch (const dnnl::error&) {
        made.widen = true;  // no bf16 matmul on this ISA
      }
      it = c.prims.emplace(key, std::move(made)).first;
    }
    g = &it->second;
  }
  if (g->widen) {
    const size_t na = static_cast<size_t>(M) * K, nb = static_cast<size_t>(K) * N;
    if (c.wide_a.size() < na) c.wide_a.resize(na);
    if (c.wide_b.size() < nb) c.wide_b.resize(nb);
    bf16_to_f32(c.wide_a.data(), A, na);
    bf16_to_f32(c.wide_b.data(), B, nb);
    // dnnl_sgemm, not ms::sgemm: the widened product is still this bf16 GEMM's time (kernel_timing.h).
    const dnnl_status_t st = dnnl_sgemm(transA ? 'T' : 'N', transB ? 'T' : 'N', M, N, K, 1.0f, c.wide_a.data(),
                                        transA ? M : K, c.wide_b.data(), transB ? K : N, accumulate ? 1.0f : 0.0f,
                                        C, N);
    MS_CHECK(st == dnnl_success, "gemm_bf16: widened dnnl_sgemm {}x{}x{} failed (status {})", M, N, K,
             static_cast<int>(st));
    if (bias) {
#pragma omp parallel for schedule(static)
      for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) C[static_cast<size_t>(i) * N + j] += bias[j];
    }
    return;
  }
  // The cached memory objects point at the caller's buffers (no allocation, no copy); the cache is
  // the calling thread's own, so re-pointing them is safe.
  g->a.set_data_handle(const_cast<bf16_t*>(A));
  g->b.set_data_handle(const_cast<bf16_t*>(B));
  g->c.set_data_handle(C);
  if (bias) g->bias.set_data_handle(const_cast<float*>(bias));
  const dnnl_status_t st = dnnl_primitive_execute(g->prim.get(), c.strm.get(),
                                                  static_cast<int>(g->args.size()), g->args.data());
  MS_CHECK(st == dnnl_success, "gemm_bf16: oneDNN matmul {}x{}x{} failed (status {})", M, N, K, static_cast<int>(st));
  c.strm.wait();
}

void matmul_forward_bf16(float* out, const bf16_t* inp, const bf16_t* weight, const float* bias,
                         int N, int C, int OC, bool accumulate) {
  gemm_bf16(false, true, N, OC, C, inp, weight, bias, out, accumulate);
}

void matmul_backward_bf16(float* dinp, float* dweight, float* dbias, const float* dout,
                          bf16_t* dout_bf16, const bf16_t* inp, const bf16_t* weight, int N,
                          int C, int OC, bool accumulate_dinp) {
  f32_to_bf16(dout_bf16, dout, static_cast<size_t>(N) * OC);
  matmul_backward_bf16_from_bf16(dinp, dweight, dout_bf16, inp, weight, N, C, OC, accumulate_dinp);
  if (dbias) add_column_sums(dbias, dout, N, OC);
}

void matmul_backward_bf16_from_bf16(float* dinp, float* dweight, const bf16_t* dout_bf16, const bf16_t* inp,
                                    const bf16_t* weight, int N, int C, int OC, bool accumulate_dinp) {
  if (dinp) gemm_bf16(false, false, N, C, OC, dout_bf16, weight, nullptr, dinp, accumulate_dinp);
  gemm_bf16(true, false, OC, C, N, dout_bf16, inp, nullptr, dweight, true);
}

int gemm_bf16_cached_primitives() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  return static_cast<int>(c.prims.size());
}

namespace {
bool isa_has(dnnl::cpu_isa isa) {
  const unsigned want = static_cast<unsigned>(isa);
  return (static_cast<unsigned>(dnnl::get_effective_cpu_isa()) & want) == want;  // ISA bit sets
}
}  // namespace

bool bf16_gemm_uses_amx() { return isa_has(dnnl::cpu_isa::avx512_core_amx); }

const char* bf16_gemm_isa() {
  if (isa_has(dnnl::cpu_isa::avx512_core_amx)) return "AMX-BF16";
  if (isa_has(dnnl::cpu_isa::avx512_core_bf16)) return "AVX-512 BF16";
  if (isa_has(dnnl::cpu_isa::avx512_core)) return "AVX-512 without BF16 (oneDNN emulates bf16)";
  return "no AVX-512 (bf16 operands widened to fp32 for sgemm)";
}

}  // namespace ms
