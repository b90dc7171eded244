// host_calibrate.cpp: see host_calibrate.h.
#include "plan/host_calibrate.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <thread>

#include "base/aligned.h"  // AlignedBuffer
#include "base/check.h"
#include "kernels/backend.h"    // cpu_kernels
#include "kernels/gemm_bf16.h"  // bf16_gemm_isa
#include "optim/adamw.h"
#include "optim/grad_norm.h"
#include "optim/lamb.h"

namespace ms::plan {

namespace {

using Clock = std::chrono::steady_clock;

// `copies` workers, each on its own std::thread with `threads` OpenMP threads, run `work` together
// (warm-up, then `repeats` timed rounds started at a barrier, each of as many calls as fill about
// 5 ms, so that short kernels are not timer noise); the median over rounds of the slowest copy's
// seconds per call.
double concurrent_seconds(int copies, int threads, int repeats, const std::function<void(int copy)>& setup,
                          const std::function<void(int copy)>& work) {
  std::vector<std::vector<double>> times(copies);
  std::atomic<int> arrived{0};
  auto barrier = [&](int round) {  // a spinning barrier per round (rounds counted from 1)
    arrived.fetch_add(1);
    while (arrived.load() < copies * round) std::this_thread::yield();
  };
  auto body = [&](int c) {
    omp_set_num_threads(threads);
    setup(c);
    work(c);  // warm-up (and oneDNN's primitive creation)
    const auto w0 = Clock::now();
    work(c);
    const double once = std::chrono::duration<double>(Clock::now() - w0).count();
    const int calls = static_cast<int>(std::clamp(std::ceil(5e-3 / std::max(once, 1e-7)), 1.0, 1000.0));
    for (int r = 0; r < repeats; r++) {
      barrier(r + 1);
      const auto t0 = Clock::now();
      for (int k = 0; k < calls; k++) work(c);
      times[c].push_back(std::chrono::duration<double>(Clock::now() - t0).count() / calls);
    }
  };
  std::vector<std::thread> pool;
  for (int c = 1; c < copies; c++) pool.emplace_back(body, c);
  body(0);
  for (auto& t : pool) t.join();
  std::vector<double> slowest(repeats, 0);
  for (int r = 0; r < repeats; r++)
    for (int c = 0; c < copies; c++) slowest[r] = std::max(slowest[r], times[c][r]);
  std::sort(slowest.begin(), slowest.end());
  return slowest[repeats / 2];
}

void fill_random(float* p, size_t n, unsigned seed) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  for (size_t i = 0; i < n; i++) p[i] = u(g);
}

struct Buffers {  // one copy's operands, sized for the largest shape of a table
  AlignedBuffer<float> a, b, c, d, e;
  AlignedBuffer<bf16_t> ha, hb, hc;
  void size(size_t na, size_t nb, size_t nc, bool bf16) {
    a = AlignedBuffer<float>(na), b = AlignedBuffer<float>(nb), c = AlignedBuffer<float>(nc);
    fill_random(a.data(), na, 1), fill_random(b.data(), nb, 2), fill_random(c.data(), nc, 3);
    if (bf16) {
      ha = AlignedBuffer<bf16_t>(na), hb = AlignedBuffer<bf16_t>(nb), hc = AlignedBuffer<bf16_t>(nc);
      cpu_kernels().f32_to_bf16(ha.data(), a.data(), na);
      cpu_kernels().f32_to_bf16(hb.data(), b.data(), nb);
      cpu_kernels().f32_to_bf16(hc.data(), c.data(), nc);
    }
  }
};

// A linear layer of forward shape M x N x K: X (M,K), W (N,K), Y (M,N).
void linear_tables(int copies, int t, const CalibrateOptions& o, bool bf16, HostThreadTables& out) {
  const double Dmax = o.gemm_dims.back();
  const size_t big = static_cast<size_t>(Dmax * Dmax);
  std::vector<Buffers> buf(copies);
  auto setup = [&](int c) { buf[c].size(big, big, big, bf16); };
  std::vector<double> fwd, bwd;
  KernelBackend& k = cpu_kernels();
  bool ready = false;
  for (double M : o.gemm_dims)
    for (double N : o.gemm_dims)
      for (double K : o.gemm_dims) {
        const int m = static_cast<int>(M), n = static_cast<int>(N), kk = static_cast<int>(K);
        auto forward = [&](int c) {
          Buffers& b = buf[c];
          if (bf16) {
            k.f32_to_bf16(b.ha.data(), b.a.data(), static_cast<size_t>(m) * kk);  // X's conversion
            k.matmul_forward_bf16(b.c.data(), b.ha.data(), b.hb.data(), nullptr, m, kk, n, false);
          } else {
            k.gemm_f32(false, true, m, n, kk, b.a.data(), b.b.data(), b.c.data(), false);
          }
        };
        auto backward = [&](int c) {
          Buffers& b = buf[c];
          if (bf16) {
            k.f32_to_bf16(b.hc.data(), b.c.data(), static_cast<size_t>(m) * n);                // dY's conversion
            k.gemm_bf16(false, false, m, kk, n, b.hc.data(), b.hb.data(), b.a.data(), false);  // dX = dY W
            k.gemm_bf16(true, false, n, kk, m, b.hc.data(), b.ha.data(), b.b.data(), true);    // dW += dY^T X
          } else {
            k.gemm_f32(false, false, m, kk, n, b.c.data(), b.b.data(), b.a.data(), false);
            k.gemm_f32(true, false, n, kk, m, b.c.data(), b.a.data(), b.b.data(), true);
          }
        };
        auto once = [&](int c) {
          if (!ready) setup(c);
        };
        const double flops = 2.0 * M * N * K;
        fwd.push_back(flops / concurrent_seconds(copies, t, o.repeats, once, forward) / 1e9);
        bwd.push_back(2 * flops /
                      concurrent_seconds(
                          copies, t, o.repeats, [](int) {}, backward) /
                      1e9);
        ready = true;
      }
  const std::string dt = bf16 ? "bf16" : "fp32";
  out.gemm[dt + "_fwd"] = fwd, out.gemm[dt + "_bwd"] = bwd;
}

void attention_tables(int copies, int t, const CalibrateOptions& o, bool bf16, HostThreadTables& out) {
  const int C = 256, NH = 4;  // head dimension 64
  std::vector<double> fwd, bwd;
  KernelBackend& k = cpu_kernels();
  for (double S : o.attention_seq) {
    const int T = static_cast<int>(S), B = std::max(1, 4096 / T);
    const size_t rows = static_cast<size_t>(B) * T;
    std::vector<Buffers> buf(copies);
    auto setup = [&](int c) {
      buf[c].size(rows * 3 * C, rows * C, rows * C, false);
      buf[c].d = AlignedBuffer<float>(rows * NH), buf[c].e = AlignedBuffer<float>(rows * 3 * C);
      fill_random(buf[c].b.data(), rows * C, 4);
    };
    auto forward = [&](int c) {
      Buffers& b = buf[c];
      k.attention_forward(bf16, b.c.data(), b.d.data(), b.a.data(), B, T, C, NH, NH, 0);
    };
    auto backward = [&](int c) {
      Buffers& b = buf[c];
      k.attention_backward(bf16, b.e.data(), b.b.data(), b.a.data(), b.c.data(), b.d.data(), B, T, C, NH, NH, 0);
    };
    const double flops = 4.0 * rows * (S + 1) / 2 * C;  // op_graph.h: 4 N keys h, keys = (s+1)/2
    fwd.push_back(flops / concurrent_seconds(copies, t, o.repeats, setup, forward) / 1e9);
    bwd.push_back(2.5 * flops /
                  concurrent_seconds(
                      copies, t, o.repeats, [](int) {}, backward) /
                  1e9);
  }
  const std::string dt = bf16 ? "bf16" : "fp32";
  out.attention[dt + "_fwd"] = fwd, out.attention[dt + "_bwd"] = bwd;
}

// Element-wise kernels and the optimizer, in the planner's byte accounting (op_graph.h).
void memory_tables(int copies, int t, const CalibrateOptions& o, HostThreadTables& out) {
  KernelBackend& k = cpu_kernels();
  const int N = 4096, C = 1024, V = 32768, Nce = 512;
  const size_t big = static_cast<size_t>(Nce) * V;
  std::vector<Buffers> buf(copies);
  std::vector<std::vector<int>> targets(copies, std::vector<int>(Nce, 7));
  std::vector<AlignedBuffer<float>> stats(copies);
  auto setup = [&](int c) {
    buf[c].size(std::max(big, size_t(N) * C * 4), std::max(big, size_t(N) * C * 4), size_t(N) * C * 4, false);
    buf[c].d = AlignedBuffer<float>(size_t(N) * C * 4), buf[c].e = AlignedBuffer<float>(size_t(N) * C * 4);
    stats[c] = AlignedBuffer<float>(size_t(4) * N + 2 * C);
    fill_random(buf[c].d.data(), size_t(N) * C * 4, 5);
  };
  auto rate = [&](double bytes, const std::function<void(int)>& s, const std::function<void(int)>& w) {
    return bytes / concurrent_seconds(copies, t, o.repeats, s, w) / 1e9;
  };
  const double nc = double(N) * C * 4;  // bytes of one (N, C) fp32 pass
  out.kernel_GBps["layernorm_fwd"] = rate(2 * nc, setup, [&](int c) {
    Buffers& b = buf[c];
    float* s = stats[c].data();
    k.layernorm_forward(b.c.data(), s, s + N, b.a.data(), s + 2 * N, s + 2 * N + C, N, C, 1e-5f);
  });
  out.kernel_GBps["layernorm_bwd"] = rate(
      3 * nc, [](int) {},
      [&](int c) {
        Buffers& b = buf[c];
        float* s = stats[c].data();
        k.layernorm_backward(b.e.data(), b.b.data(), b.b.data() + C, b.d.data(), b.a.data(), s + 2 * N, s, s + N, N, C);
      });
  out.kernel_GBps["gelu_fwd"] = rate(
      2 * nc, [](int) {},
      [&](int c) {
        Buffers& b = buf[c];
        k.bias_gelu_forward(b.c.data(), b.e.data(), b.b.data(), N, C);
      });
  out.kernel_GBps["gelu_bwd"] = rate(
      3 * nc, [](int) {},
      [&](int c) {
        Buffers& b = buf[c];
        k.bias_gelu_backward(b.e.data(), b.b.data(), b.d.data(), b.a.data(), N, C);
      });
  out.kernel_GBps["cross_entropy"] = rate(
      5.0 * Nce * V * 4, [](int) {},
      [&](int c) {
        Buffers& b = buf[c];
        k.softmax_cross_entropy(b.e.data(), b.b.data(), b.a.data(), targets[c].data(), Nce, V, V, 1.0f / Nce);
      });
  const size_t n = size_t(N) * C * 4;
  out.kernel_GBps["stream"] = rate(
      3.0 * n * 4, [](int) {},
      [&](int c) {
        Buffers& b = buf[c];
        float* a = b.d.data();
        const float *x = b.a.data(), *y = b.c.data();
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < n; i++) a[i] = x[i] + 0.5f * y[i];
      });
  // The optimizer over n parameters: params a, grads d, moments b, c, LAMB's update e.
  const std::vector<ParamTensor> tensors = {{"w", 0, n, true}};
  const double adam_s = concurrent_seconds(
      copies, t, o.repeats, [](int) {},
      [&](int c) {
        Buffers& b = buf[c];
        (void)grad_sq_sum(b.d.data(), n);
        adamw_update(b.a.data(), b.d.data(), b.b.data(), b.c.data(), tensors, 1e-9f, 1, AdamHyper{});
      });
  const double lamb_s = concurrent_seconds(
      copies, t, o.repeats, [](int) {},
      [&](int c) {
        Buffers& b = buf[c];
        (void)grad_sq_sum(b.d.data(), n);
        lamb_update(b.a.data(), b.d.data(), b.b.data(), b.c.data(), b.e.data(), tensors, 1e-9f, 1, LambHyper{});
      });
  out.adamw_ns_per_param = adam_s / n * 1e9, out.lamb_ns_per_param = lamb_s / n * 1e9;
}

}  // namespace

HostTables measure_host_compute(const CalibrateOptions& o) {
  const int cores = o.cores > 0 ? o.cores : omp_get_num_procs();
  MS_CHECK(o.repeats >= 1 && !o.gemm_dims.empty() && !o.attention_seq.empty(),
           "plan: calibration needs repeats >= 1 and non-empty grids");
  HostTables h;
  for (int t = 1; t < cores; t *= 2) h.threads.push_back(t);
  h.threads.push_back(cores);
  h.gemm_dims = o.gemm_dims, h.attention_seq = o.attention_seq;
  const int saved = omp_get_max_threads();
  for (int t : h.threads) {
    const int copies = std::max(1, cores / t);
    HostThreadTables& x = h.by_threads[t];
    for (const bool bf16 : {false, true}) {
      if (bf16 && !o.bf16) continue;
      linear_tables(copies, t, o, bf16, x);
      attention_tables(copies, t, o, bf16, x);
    }
    memory_tables(copies, t, o, x);
  }
  omp_set_num_threads(saved);
  return h;  // validated by the caller once the floors are measured (host_desc.h)
}

}  // namespace ms::plan
