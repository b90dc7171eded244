// bench_cuda_kernels: the CUDA kernels (kernels/cuda_kernels.h) at GPT-2 124M training shapes
// (N = B*T = 16384 rows, C = 768), one JSON object per line on stdout (nlohmann::json):
//   {"side":"megascale","op":...,"dtype":...,"shape":...,"ms":median,"tflops"|"gbps":...}
// GEMMs: the linear layers' forward (768->2304, 768->768, 768->3072, 3072->768, 768->50304) in
// fp32 (true fp32) and bf16, and their two backward GEMMs in bf16; the ceilings: a device-to-
// device copy (bytes read + written) and an 8192^3 bf16 GEMM; the elementwise kernels' GB/s,
// counting the fewest bytes each must move (each input read once, each output written once).
// Attention (flash-style, causal) forward and backward at B = 16, T = 1024, 12 heads of 64, fp32
// and bf16 operands, full and sliding (W = 256: shape suffix "w256"); FLOPs counted on the attended
// (query, key) pairs only: 4 * HS per pair forward, 2.5x that backward (FlashAttention's convention).
// bench/torch_ops_cuda.py times PyTorch on the same ops, shapes and byte counts; bench/gpu_table.py
// joins both. Timing: CUDA events around each call, 3 warm-ups, median of 20. Inputs are random
// (never zeros). Needs a CUDA device (exits 2 naming why when none opens).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/bf16.h"
#include "base/device.h"
#include "kernels/cuda_kernels.h"

namespace {
using namespace ms;

constexpr int kN = 16384, kC = 768, kV = 50257, kVp = 50304;

double median_ms(const std::function<void()>& f, int warm = 3, int reps = 20) {
  Event a = event_create(), b = event_create();
  for (int i = 0; i < warm; ++i) f();
  std::vector<float> t;
  for (int i = 0; i < reps; ++i) {
    event_record(a, {});
    f();
    event_record(b, {});
    event_sync(b);
    t.push_back(event_elapsed_ms(a, b));
  }
  event_destroy(a);
  event_destroy(b);
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

void emit(const std::string& op, const std::string& dtype, const std::string& shape, double ms,
          double flops, double bytes) {
  nlohmann::json j = {{"side", "megascale"}, {"op", op}, {"dtype", dtype}, {"shape", shape}, {"ms", ms}};
  if (flops > 0) j["tflops"] = flops / (ms * 1e-3) / 1e12;
  if (bytes > 0) j["gbps"] = bytes / (ms * 1e-3) / 1e9;
  std::printf("%s\n", j.dump().c_str());
  std::fflush(stdout);
}

// Uniform random values of standard deviation `scale` (xorshift: cheap for the 824 M logits).
template <typename T>
DeviceBuffer<T> rand_buf(size_t n, std::mt19937& g, float scale = 1.f) {
  uint64_t st = (static_cast<uint64_t>(g()) << 32) | g() | 1;
  const float k = scale * 1.7320508f / 2147483648.f;  // uniform(-sqrt3, sqrt3) * scale
  std::vector<T> h(n);
  for (auto& x : h) {
    st ^= st << 13;
    st ^= st >> 7;
    st ^= st << 17;
    const float v = static_cast<float>(static_cast<int32_t>(st >> 32)) * k;
    if constexpr (sizeof(T) == 2) x = f32_to_bf16_rne(v);
    else x = v;
  }
  DeviceBuffer<T> b(n);
  b.upload(h.data(), n);
  return b;
}
std::string dims(long a, long b, long c) { return std::to_string(a) + "x" + std::to_string(b) + "x" + std::to_string(c); }

void bench_gemms(std::mt19937& g) {
  const std::vector<std::pair<int, int>> layers = {{768, 2304}, {768, 768}, {768, 3072}, {3072, 768}, {768, 50304}};
  for (const auto& [C, OC] : layers) {
    const size_t nin = static_cast<size_t>(kN) * C, nout = static_cast<size_t>(kN) * OC, nw = static_cast<size_t>(OC) * C;
    const double flops = 2.0 * kN * C * OC;
    const std::string sh = dims(kN, C, OC);
    {
      auto x = rand_buf<float>(nin, g), w = rand_buf<float>(nw, g, 0.05f);
      DeviceBuffer<float> o(nout);
      emit("gemm_fwd", "fp32", sh, median_ms([&] { cuda::matmul_forward(o.data(), x.data(), w.data(), nullptr, kN, C, OC, false, {}); }), flops, 0);
    }
    auto x = rand_buf<bf16_t>(nin, g), w = rand_buf<bf16_t>(nw, g, 0.05f), dout = rand_buf<bf16_t>(nout, g);
    DeviceBuffer<float> o(nout), dinp(nin), dw(nw);
    emit("gemm_fwd", "bf16", sh, median_ms([&] { cuda::matmul_forward_bf16(o.data(), x.data(), w.data(), nullptr, kN, C, OC, false, {}); }), flops, 0);
    emit("gemm_bwd_dinp", "bf16", sh, median_ms([&] { cuda::gemm_bf16(false, false, kN, C, OC, dout.data(), w.data(), nullptr, dinp.data(), false, {}); }), flops, 0);
    emit("gemm_bwd_dweight", "bf16", sh, median_ms([&] { cuda::gemm_bf16(true, false, OC, C, kN, dout.data(), x.data(), nullptr, dw.data(), false, {}); }), flops, 0);
  }
  const int S = 8192;
  auto a = rand_buf<bf16_t>(static_cast<size_t>(S) * S, g), b = rand_buf<bf16_t>(static_cast<size_t>(S) * S, g);
  DeviceBuffer<float> c(static_cast<size_t>(S) * S);
  emit("gemm_ceiling", "bf16", dims(S, S, S), median_ms([&] { cuda::gemm_bf16(false, false, S, S, S, a.data(), b.data(), nullptr, c.data(), false, {}); }), 2.0 * S * S * S, 0);
}

void bench_elementwise(std::mt19937& g) {
  {
    const size_t n = size_t{1} << 28;  // 1 GiB of floats
    DeviceBuffer<float> a(n), b(n);
    device_memset(a.data(), 0x3f, n * 4);  // 0x3f3f3f3f: 0.747, not zeros
    emit("copy", "fp32", std::to_string(n), median_ms([&] { copy_bytes(b.data(), Device::kCuda, a.data(), Device::kCuda, n * 4); }), 0, 2.0 * n * 4);
  }
  const size_t nc = static_cast<size_t>(kN) * kC, n4c = nc * 4;
  {
    auto x = rand_buf<float>(nc, g, 2.f), w = rand_buf<float>(kC, g), b = rand_buf<float>(kC, g), dout = rand_buf<float>(nc, g);
    DeviceBuffer<float> o(nc), m(kN), r(kN), dinp(nc), dw(kC), db(kC);
    emit("layernorm_fwd", "fp32", dims(kN, kC, 1), median_ms([&] { cuda::layernorm_forward(o.data(), m.data(), r.data(), x.data(), w.data(), b.data(), kN, kC, 1e-5f, {}); }), 0, 2.0 * nc * 4);
    // backward: reads dout and inp, reads and writes dinp (it accumulates)
    emit("layernorm_bwd", "fp32", dims(kN, kC, 1), median_ms([&] { cuda::layernorm_backward(dinp.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(), m.data(), r.data(), kN, kC, {}); }), 0, 4.0 * nc * 4);
  }
  {
    auto pre = rand_buf<float>(n4c, g, 2.f), dout = rand_buf<float>(n4c, g);
    DeviceBuffer<float> o(n4c), dpre(n4c);
    const std::string sh = dims(kN, 4 * kC, 1);
    emit("gelu_fwd", "fp32", sh, median_ms([&] { cuda::bias_gelu_forward(o.data(), pre.data(), nullptr, kN, 4 * kC, {}); }), 0, 2.0 * n4c * 4);
    emit("gelu_bwd", "fp32", sh, median_ms([&] { cuda::bias_gelu_backward(dpre.data(), nullptr, dout.data(), pre.data(), kN, 4 * kC, {}); }), 0, 3.0 * n4c * 4);
  }
  {
    const size_t nl = static_cast<size_t>(kN) * kVp;
    auto logits = rand_buf<float>(nl, g, 3.f);
    std::vector<int> t(kN);
    std::uniform_int_distribution<int> d(0, kV - 1);
    for (int& x : t) x = d(g);
    DeviceBuffer<int> dt(kN);
    dt.upload(t.data(), kN);
    DeviceBuffer<float> loss(kN), dl(nl);
    emit("cross_entropy_fwd_bwd", "fp32", dims(kN, kVp, 1), median_ms([&] { cuda::softmax_cross_entropy_forward_backward(loss.data(), dl.data(), logits.data(), dt.data(), kN, kV, kVp, 1.f / kN, {}); }), 0, 2.0 * nl * 4);
  }
  {
    auto x = rand_buf<float>(n4c, g);
    DeviceBuffer<bf16_t> o(n4c);
    emit("convert_f32_bf16", "bf16", std::to_string(n4c), median_ms([&] { cuda::f32_to_bf16(o.data(), x.data(), n4c, {}); }), 0, 6.0 * n4c);
  }
  {
    const size_t np = 124439808;  // GPT-2 124M's parameters (tied head)
    auto p = rand_buf<float>(np, g), gr = rand_buf<float>(np, g, 0.1f), m = rand_buf<float>(np, g, 0.01f), v = rand_buf<float>(np, g, 0.01f);
    device_memset(v.data(), 0x30, np * 4);  // small positive second moments
    int t = 1;
    emit("adamw", "fp32", std::to_string(np), median_ms([&] { cuda::adamw_update(p.data(), gr.data(), m.data(), v.data(), np, true, 6e-4f, t++, 0.9f, 0.95f, 1e-8f, 0.1f, 1.f, nullptr, false, {}); }), 0, 28.0 * np);
  }
  {
    std::vector<int> ids(kN);
    std::uniform_int_distribution<int> d(0, kV - 1);
    for (int& x : ids) x = d(g);
    DeviceBuffer<int> did(kN);
    did.upload(ids.data(), kN);
    auto wte = rand_buf<float>(static_cast<size_t>(kVp) * kC, g), wpe = rand_buf<float>(static_cast<size_t>(1024) * kC, g);
    auto dout = rand_buf<float>(nc, g);
    DeviceBuffer<float> o(nc), dwte(static_cast<size_t>(kVp) * kC), dwpe(static_cast<size_t>(1024) * kC);
    const std::string sh = dims(16, 1024, kC);
    emit("embedding_fwd", "fp32", sh, median_ms([&] { cuda::embedding_forward(o.data(), did.data(), wte.data(), wpe.data(), 16, 1024, kC, kVp, {}); }), 0, 3.0 * nc * 4);
    // backward: reads dout once, reads and writes the touched wte rows and all of wpe
    emit("embedding_bwd", "fp32", sh, median_ms([&] { cuda::embedding_backward(dwte.data(), dwpe.data(), dout.data(), did.data(), 16, 1024, kC, kVp, {}); }), 0, 3.0 * nc * 4);
  }
}
void bench_attention(std::mt19937& g) {
  const int B = 16, T = 1024, C = 768, NH = 12, HS = C / NH;
  const size_t n3 = static_cast<size_t>(B) * T * 3 * C, no = n3 / 3, nl = static_cast<size_t>(B) * NH * T;
  auto qkv = rand_buf<float>(n3, g), dout = rand_buf<float>(no, g);
  DeviceBuffer<float> out(no), lse(nl), dqkv(n3);
  for (const int W : {0, 256}) {
    double pairs = 0;  // attended (query, key) pairs of one head
    for (int t = 0; t < T; ++t) pairs += W > 0 ? std::min(t + 1, W) : t + 1;
    const double fwd_flops = 4.0 * HS * pairs * B * NH;
    std::string sh = dims(B, T, C);  // appended piecewise: GCC 12 warns falsely on "w" + std::string&&
    if (W > 0) {
      sh += 'w';
      sh += std::to_string(W);
    }
    for (const bool bf16 : {false, true}) {
      const auto fwd = bf16 ? cuda::attention_forward_bf16 : cuda::attention_forward;
      const auto bwd = bf16 ? cuda::attention_backward_bf16 : cuda::attention_backward;
      const char* dt = bf16 ? "bf16" : "fp32";
      emit("attn_fwd", dt, sh, median_ms([&] { fwd(out.data(), lse.data(), qkv.data(), B, T, C, NH, NH, W, {}); }), fwd_flops, 0);
      emit("attn_bwd", dt, sh, median_ms([&] { bwd(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), B, T, C, NH, NH, W, {}); }), 2.5 * fwd_flops, 0);
    }
  }
}
}  // namespace

int main() {
  if (!ms::cuda_available()) {
    std::fprintf(stderr, "bench_cuda_kernels: no CUDA device opens: %s\n", ms::cuda_unavailable_reason().c_str());
    return 2;
  }
  try {
    const ms::DeviceInfo info = ms::cuda_device_info();
    nlohmann::json j = {{"side", "megascale"}, {"op", "device"}, {"name", info.name}, {"sms", info.sm_count},
                        {"clock_khz", info.clock_khz}, {"cc", std::to_string(info.cc_major) + "." + std::to_string(info.cc_minor)},
                        // dense bf16 tensor-core peak: SMs x clock x 4096 FLOP per SM per clock (sm_90)
                        {"peak_bf16_tflops", info.sm_count * (info.clock_khz * 1e3) * 4096.0 / 1e12}};
    std::printf("%s\n", j.dump().c_str());
    std::mt19937 g(std::random_device{}());
    bench_gemms(g);
    bench_elementwise(g);
    bench_attention(g);
    ms::device_sync();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_cuda_kernels: %s\n", e.what());
    return 1;
  }
  return 0;
}
