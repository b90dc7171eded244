// bench_packed_weights: is it worth keeping bf16 weights in oneDNN's blocked (pre-packed) layout?
// For GPT-2 124M at B*T = 1024 rows it times, per training step, the forward and input-gradient
// GEMMs of every linear layer (12 blocks: qkv, attention projection, fc, fc projection; and the
// tied LM head) with plain row-major bf16 weights and with weights reordered into the layout the
// primitive asks for, plus the per-step cost of that reorder (weights change every step, so the
// packing is redone each step, from the fp32 master by default or from a bf16 copy with --from-bf16).
// Prints milliseconds per step and the net gain. docs/performance.md quotes it.
// Usage: bench_packed_weights [--from-bf16] [--reps N]
#include <oneapi/dnnl/dnnl.hpp>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "base/clock.h"  // steady_seconds

namespace {

using dt = dnnl::memory::data_type;
using dims = dnnl::memory::dims;

double now() { return ms::steady_seconds(); }

struct Totals { double plain = 0, packed = 0, reorder = 0; };

// Adds (times `count` layers) the forward and input-gradient GEMM times of one (OC, IC) weight.
void time_weight(dnnl::engine& eng, dnnl::stream& s, int M, int OC, int IC, int count, int reps, bool from_bf16,
                 Totals& t) {
  std::vector<uint16_t> act(static_cast<size_t>(M) * std::max(OC, IC), 0x3c00), wb(static_cast<size_t>(OC) * IC, 0x3c00);
  std::vector<float> wf(static_cast<size_t>(OC) * IC, 0.01f), out(static_cast<size_t>(M) * std::max(OC, IC));
  for (int dir = 0; dir < 2; dir++) {  // 0: out = act W^T (forward); 1: dinp = dout W
    const int K = dir ? OC : IC, N = dir ? IC : OC;
    const dims wstrides = dir ? dims{N, 1} : dims{1, K};
    dnnl::memory::desc a_md({M, K}, dt::bf16, dims{K, 1}), c_md({M, N}, dt::f32, dims{N, 1});
    dnnl::memory::desc w_plain({K, N}, dt::bf16, wstrides), w_f32({K, N}, dt::f32, wstrides);
    for (int packed = 0; packed < 2; packed++) {
      dnnl::memory::desc w_md = packed ? dnnl::memory::desc({K, N}, dt::bf16, dnnl::memory::format_tag::any) : w_plain;
      dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, w_md, c_md), eng);
      dnnl::matmul mm(pd);
      dnnl::memory a(a_md, eng, act.data()), c(c_md, eng, out.data()), w(w_plain, eng, wb.data());
      if (packed) {
        dnnl::memory src = from_bf16 ? dnnl::memory(w_plain, eng, wb.data()) : dnnl::memory(w_f32, eng, wf.data());
        w = dnnl::memory(pd.weights_desc(), eng);
        dnnl::reorder ro(src, w);
        ro.execute(s, src, w);
        s.wait();
        double t0 = now();
        for (int r = 0; r < reps; r++) ro.execute(s, src, w);
        s.wait();
        t.reorder += (now() - t0) / reps * count;
      }
      mm.execute(s, {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, w}, {DNNL_ARG_DST, c}});
      s.wait();
      double t0 = now();
      for (int r = 0; r < reps; r++) mm.execute(s, {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, w}, {DNNL_ARG_DST, c}});
      s.wait();
      (packed ? t.packed : t.plain) += (now() - t0) / reps * count;
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  bool from_bf16 = false;
  int reps = 5;
  CLI::App app{"bench_packed_weights: plain versus pre-packed bf16 weights for GPT-2 124M GEMMs"};
  app.add_flag("--from-bf16", from_bf16, "repack from a bf16 copy (default: from the fp32 master)");
  app.add_option("--reps", reps, "timed repetitions per GEMM")->check(CLI::Range(1, 100000))->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream s(eng);
  const int M = 1024, C = 768, L = 12, Vp = 50304;
  Totals blocks, head;
  for (auto [oc, ic] : {std::pair{3 * C, C}, {C, C}, {4 * C, C}, {C, 4 * C}})
    time_weight(eng, s, M, oc, ic, L, reps, from_bf16, blocks);
  time_weight(eng, s, M, Vp, C, 1, std::max(1, reps / 2), from_bf16, head);
  std::printf("GPT-2 124M, %d rows, repacking from %s, ms per step (forward + input-gradient GEMMs):\n", M,
              from_bf16 ? "a bf16 copy" : "the fp32 master");
  for (auto [name, t] : {std::pair{"12 blocks", blocks}, {"LM head", head}})
    std::printf("  %-9s plain %7.1f  packed %7.1f  repack %6.1f  net gain %+7.1f\n", name, t.plain * 1e3,
                t.packed * 1e3, t.reorder * 1e3, (t.plain - t.packed - t.reorder) * 1e3);
  return 0;
}
