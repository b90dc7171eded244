// Cross-check of the fused kernels against PyTorch (float64) as an independent oracle for the
// conventions the naive references in test_kernels.cpp / test_attention.cpp also encode: LayerNorm
// eps and biased variance, nn.GELU(approximate="tanh"), causal/sliding-window masking and the
// 1/sqrt(HS) scale, cross_entropy with ignore_index=-1 over the first V of Vp columns.
// The kernels' inputs and outputs are written to a temporary directory; /usr/bin/python3 recomputes
// everything with torch (forward and autograd backward of sum(out * g)) and prints the maximum
// absolute differences (the bf16 attention kernels: relative L2 errors). Skipped when /usr/bin/python3 has no torch (a failure under CI=true).
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/attention.h"
#include "kernels/cross_entropy.h"
#include "kernels/gelu.h"
#include "kernels/layernorm.h"
#include "common/test_util.h"  // ms::testing::{make_temp_dir, run_cmd, torch_python}

namespace {

// The oracle: reads the dumps, prints "<name> <max abs diff> <max abs reference>" per output.
constexpr const char* kScript = R"PY(
import sys, numpy as np, torch
torch.set_default_dtype(torch.float64)
d = sys.argv[1]
B, T, C, NH, V, Vp = 2, 100, 96, 3, 77, 80
N, HS = B * T, C // NH
def L(name, *shape):
    return torch.from_numpy(np.fromfile(f"{d}/{name}.bin", dtype=np.float32).astype(np.float64).reshape(*shape))
def rep(name, got, ref):
    print(name, (got - ref).abs().max().item(), ref.abs().max().item())
g = L("g", N, C)
x = L("ln_x", N, C).requires_grad_(); w = L("ln_w", C).requires_grad_(); b = L("ln_b", C).requires_grad_()
y = torch.nn.functional.layer_norm(x, (C,), w, b, eps=1e-5); (y * g).sum().backward()
rep("layernorm_out", L("ln_out", N, C), y.detach()); rep("layernorm_dinp", L("ln_dx", N, C), x.grad)
rep("layernorm_dweight", L("ln_dw", C), w.grad); rep("layernorm_dbias", L("ln_db", C), b.grad)
p = (L("ge_pre", N, C) + L("ln_b", C)).requires_grad_()
o = torch.nn.GELU(approximate="tanh")(p); (o * g).sum().backward()
rep("gelu_out", L("ge_out", N, C), o.detach()); rep("gelu_dpre", L("ge_dpre", N, C), p.grad)
rep("gelu_dbias", L("ge_db", C), p.grad.sum(0))
for W in (0, 17):
    qkv = L(f"at_qkv_{W}", B, T, 3 * C).requires_grad_()
    q, k, v = (z.view(B, T, NH, HS).transpose(1, 2) for z in qkv.split(C, dim=2))
    i = torch.arange(T)[:, None]; j = torch.arange(T)[None, :]
    mask = (j <= i) & ((j > i - W) if W > 0 else torch.ones(T, T, dtype=torch.bool))
    att = ((q @ k.transpose(-1, -2)) / np.sqrt(HS)).masked_fill(~mask, float("-inf"))
    lse = torch.logsumexp(att, -1); y = (torch.softmax(att, -1) @ v).transpose(1, 2).reshape(B, T, C)
    (y * g.view(B, T, C)).sum().backward()
    rep(f"attention_out_w{W}", L(f"at_out_{W}", B, T, C), y.detach())
    rep(f"attention_lse_w{W}", L(f"at_lse_{W}", B, NH, T), lse.detach())
    rep(f"attention_dqkv_w{W}", L(f"at_dqkv_{W}", B, T, 3 * C), qkv.grad)
    # bf16 kernels: relative L2 error (printed as the diff, with reference 1)
    for name, got, ref in (("out", L(f"at16_out_{W}", B, T, C), y.detach()),
                           ("lse", L(f"at16_lse_{W}", B, NH, T), lse.detach()),
                           ("dqkv", L(f"at16_dqkv_{W}", B, T, 3 * C), qkv.grad)):
        print(f"attention_bf16_{name}_w{W}", ((got - ref).norm() / ref.norm()).item(), 1.0)
logits = L("ce_logits", N, Vp); t = L("ce_t", N).long()
lg = logits[:, :V].clone().requires_grad_()
loss = torch.nn.functional.cross_entropy(lg, t, ignore_index=-1, reduction="none"); (loss.sum() / N).backward()
dl = L("ce_dl", N, Vp)
rep("ce_losses", L("ce_losses", N), loss.detach()); rep("ce_dlogits", dl[:, :V], lg.grad)
rep("ce_dlogits_padding", dl[:, V:], torch.zeros(N, Vp - V))
)PY";

bool have_torch() {
  return ms::testing::run_cmd(std::string(ms::testing::torch_python()) + " -c 'import torch, numpy'").code == 0;
}

TEST(KernelsVsPyTorch, AllKernelsMatchTorchFloat64) {
  if (!have_torch()) MS_SKIP_OR_FAIL_IN_CI(ms::testing::torch_python() << " has no torch");
  const std::string dir = ms::testing::make_temp_dir("kernels_torch");
  ASSERT_FALSE(dir.empty());
  auto dump = [&](const std::string& name, const std::vector<float>& v) {
    std::ofstream f(dir + "/" + name + ".bin", std::ios::binary);
    f.write(reinterpret_cast<const char*>(v.data()), (std::streamsize)(v.size() * sizeof(float)));
  };
  const int B = 2, T = 100, C = 96, NH = 3, N = B * T, V = 77, Vp = 80;
  ms::testing::TestRng rng(2024);  // ms::splitmix64, uniform floats in [lo, hi)
  const auto g = rng.vec((size_t)N * C, -1, 1);
  dump("g", g);
  {  // layernorm
    auto x = rng.vec((size_t)N * C, -2, 2), w = rng.vec(C, -1, 1), b = rng.vec(C, -1, 1);
    std::vector<float> out((size_t)N * C), mean(N), rstd(N), dx((size_t)N * C, 0.0f), dw(C, 0.0f), db(C, 0.0f);
    ms::layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
    ms::layernorm_backward(dx.data(), dw.data(), db.data(), g.data(), x.data(), w.data(), mean.data(), rstd.data(), N, C);
    dump("ln_x", x), dump("ln_w", w), dump("ln_b", b), dump("ln_out", out), dump("ln_dx", dx), dump("ln_dw", dw),
        dump("ln_db", db);
    // bias + GeLU (reuses the LayerNorm bias as its bias)
    auto pre = rng.vec((size_t)N * C, -5, 5);
    dump("ge_pre", pre);
    std::vector<float> gout((size_t)N * C), dpre((size_t)N * C), dbias(C, 0.0f);
    ms::bias_gelu_forward(gout.data(), pre.data(), b.data(), N, C);
    ms::bias_gelu_backward(dpre.data(), dbias.data(), g.data(), pre.data(), N, C);
    dump("ge_out", gout), dump("ge_dpre", dpre), dump("ge_db", dbias);
  }
  for (int window : {0, 17}) {
    auto qkv = rng.vec((size_t)N * 3 * C, -1, 1);
    std::vector<float> out((size_t)N * C), lse((size_t)B * NH * T), dqkv((size_t)N * 3 * C);
    ms::attention_forward(out.data(), lse.data(), qkv.data(), B, T, C, NH, NH, window);
    ms::attention_backward(dqkv.data(), g.data(), qkv.data(), out.data(), lse.data(), B, T, C, NH, NH, window);
    const std::string w = std::to_string(window);
    dump("at_qkv_" + w, qkv), dump("at_out_" + w, out), dump("at_lse_" + w, lse), dump("at_dqkv_" + w, dqkv);
    ms::attention_forward_bf16(out.data(), lse.data(), qkv.data(), B, T, C, NH, NH, window);
    ms::attention_backward_bf16(dqkv.data(), g.data(), qkv.data(), out.data(), lse.data(), B, T, C, NH, NH, window);
    dump("at16_out_" + w, out), dump("at16_lse_" + w, lse), dump("at16_dqkv_" + w, dqkv);
  }
  {  // cross-entropy; every 9th row ignored
    auto logits = rng.vec((size_t)N * Vp, -5, 5);
    std::vector<int> t(N);
    std::vector<float> tf(N), losses(N), dl((size_t)N * Vp);
    for (int i = 0; i < N; ++i) tf[i] = (float)(t[i] = i % 9 == 0 ? -1 : (i * 31) % V);
    dump("ce_logits", logits), dump("ce_t", tf);
    ms::softmax_cross_entropy_forward_backward(losses.data(), dl.data(), logits.data(), t.data(), N, V, Vp, 1.0f / N);
    dump("ce_losses", losses), dump("ce_dl", dl);
  }
  {
    std::ofstream f(dir + "/oracle.py");
    f << kScript;
  }
  const auto r = ms::testing::run_cmd(std::string(ms::testing::torch_python()) + " " + dir + "/oracle.py " + dir);
  ASSERT_EQ(r.code, 0) << r.output;
  std::filesystem::remove_all(dir);
  const std::string& output = r.output;
  std::istringstream lines(output);
  std::string name;
  double diff, ref;
  int checked = 0;
  while (lines >> name >> diff >> ref) {
    if (name.rfind("attention_bf16", 0) == 0)  // bf16 operands: relative L2 error ~2.5 bf16 ulps at most
      EXPECT_LE(diff, 1e-2) << name << " (relative L2 error)";
    else  // float32 kernels vs float64 torch: a few float ulps of the largest magnitude involved.
      EXPECT_LE(diff, 1e-5 * std::max(1.0, ref)) << name << " (max |ref| " << ref << ")";
    ++checked;
  }
  EXPECT_EQ(checked, 22) << output;  // every line the oracle prints
}

}  // namespace
