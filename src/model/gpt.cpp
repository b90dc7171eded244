// gpt.cpp: GPT forward/backward over explicit buffers (see gpt.h for the dimension letters).
#include "model/gpt.h"

#include <algorithm>  // std::min, std::copy
#include <cmath>      // std::sqrt, std::log, std::cos
#include <cstring>    // std::memcpy

#include "kernels/attention.h"      // attention_forward, attention_backward
#include "base/check.h"          // MS_CHECK
#include "base/cpu_features.h"   // cpu_has_amx_bf16
#include "base/log.h"            // logger
#include "kernels/bf16_convert.h"  // f32_to_bf16
#include "kernels/cross_entropy.h"  // softmax_cross_entropy_forward_backward
#include "kernels/gelu.h"           // bias_gelu_forward, bias_gelu_backward
#include "kernels/gemm_bf16.h"      // matmul_forward_bf16, matmul_backward_bf16
#include "kernels/layernorm.h"      // layernorm_forward, layernorm_backward
#include "kernels/matmul.h"         // matmul_forward, matmul_backward
#include "base/rng.h"            // Rng

namespace ms {

GPT::GPT(const ModelConfig& cfg, int maxB, int maxT, DType precision)
    : cfg_(cfg), maxB_(maxB), maxT_(maxT), L_(cfg.n_layer), C_(cfg.n_embd), NH_(cfg.n_head),
      V_(cfg.vocab_size), Vp_(cfg.padded_vocab()), precision_(precision) {
  MS_CHECK(maxT <= cfg.max_seq_len, "GPT: sequence length {} exceeds model.max_seq_len={}", maxT, cfg.max_seq_len);
  ParamLayout lay = build_param_layout(cfg);
  specs_ = std::move(lay.specs);
  block_offset_ = std::move(lay.block_offset);
  wte_ = lay.wte, wpe_ = lay.wpe, lnf_w_ = lay.lnf_w, lnf_b_ = lay.lnf_b;
  const size_t off = lay.total;
  params_.resize(off);
  grads_.resize(off);
  assign_activations();
  MS_CHECK(precision_ == DType::kF32 || precision_ == DType::kBF16, "GPT: precision {} is not fp32 or bf16",
           dtype_name(precision_));
  if (precision_ == DType::kBF16) {
    bf16_weights_.resize(off);
    static bool noticed = false;  // one line per process
    if (!bf16_gemm_uses_amx() && !noticed) {
      noticed = true;
      logger().info("precision=bf16 without AMX-BF16 (oneDNN: {}); bf16 GEMMs fall back to slower kernels, "
                    "results agree within bf16 rounding", bf16_gemm_isa());
    }
  }
}

void GPT::refresh_bf16_weights() {
  if (precision_ != DType::kBF16) return;
  bf16_weights_.refresh(params_.data());
}

void GPT::linear_forward(float* out, const float* inp, bf16_t* inp_bf16, bool convert_inp,
                         const float* weight, const float* bias, int N, int C, int OC, bool accumulate) {
  if (precision_ == DType::kF32) {
    matmul_forward(out, inp, weight, bias, N, C, OC, accumulate);
    return;
  }
  if (convert_inp) f32_to_bf16(inp_bf16, inp, static_cast<size_t>(N) * C);
  const bf16_t* wb = bf16_weights_.data() + (weight - params_.data());
  matmul_forward_bf16(out, inp_bf16, wb, bias, N, C, OC, accumulate);
}

void GPT::linear_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                          const float* inp, const bf16_t* inp_bf16, const float* weight, int N,
                          int C, int OC, bool accumulate_dinp) {
  if (precision_ == DType::kF32) {
    matmul_backward(dinp, dweight, dbias, dout, inp, weight, N, C, OC, accumulate_dinp);
    return;
  }
  const bf16_t* wb = bf16_weights_.data() + (weight - params_.data());
  matmul_backward_bf16(dinp, dweight, dbias, dout, dout_bf16_, inp_bf16, wb, N, C, OC, accumulate_dinp);
}

BlockParams GPT::block_params(float* base, int l) const {
  const size_t C = C_;
  float* p = base + block_offset_[l];
  BlockParams b{};
  auto take = [&](size_t n) { float* r = p; p += n; return r; };
  b.ln1_w = take(C); b.ln1_b = take(C);
  b.qkv_w = take(3 * C * C); b.qkv_b = take(3 * C);
  b.attn_proj_w = take(C * C); b.attn_proj_b = take(C);
  if (!cfg_.parallel_block()) { b.ln2_w = take(C); b.ln2_b = take(C); }
  else { b.ln2_w = b.ln2_b = nullptr; }
  b.fc_w = take(4 * C * C); b.fc_b = take(4 * C);
  b.fc_proj_w = take(4 * C * C); b.fc_proj_b = take(C);
  return b;
}

void GPT::assign_activations() {
  const size_t N = static_cast<size_t>(maxB_) * maxT_, C = C_;
  const bool par = cfg_.parallel_block();
  const bool bf16 = precision_ == DType::kBF16;
  // Per block: ln1 C, ln1 stats 2, qkv 3C, atty C, lse NH, [res_att C, ln2 C, ln2 stats 2], fch 4C,
  // fch_gelu 4C, out C. In bf16 mode the fp32 ln1 and ln2 are only GEMM inputs (the backward reads
  // their bf16 copies), so one shared fp32 scratch of each serves every layer; GeLU writes its
  // bf16 output directly and has no fp32 buffer at all (fch_gelu is nullptr).
  const size_t gemm_only = N * (C + (par ? 0 : C) + 4 * C);  // ln1, [ln2], fch_gelu (per block)
  const size_t shared_scratch = N * (C + (par ? 0 : C));      // bf16 mode: GeLU writes bf16 directly
  size_t per_block = N * (C + 2 + 3 * C + C + NH_ + 4 * C + 4 * C + C);
  if (!par) per_block += N * (C + C + 2);
  if (bf16) per_block -= gemm_only;
  size_t total = N * C                          // encoded
                 + per_block * L_              // blocks
                 + (bf16 ? shared_scratch : 0)  // shared scratch (bf16 mode)
                 + N * (C + 2)                 // lnf + stats
                 + N * static_cast<size_t>(Vp_)  // logits
                 + N                           // losses
                 + N * (C + C + 3 * C + C + 4 * C);  // dres, dln, dqkv, datty, dfch
  acts_.resize(total);
  inputs_.resize(N);
  targets_.resize(N);
  float* p = acts_.data();
  auto take = [&](size_t n) { float* r = p; p += n; return r; };
  encoded_ = take(N * C);
  float *shared_ln1 = nullptr, *shared_ln2 = nullptr;
  if (bf16) {
    shared_ln1 = take(N * C);
    shared_ln2 = par ? nullptr : take(N * C);
  }
  blocks_.resize(L_);
  for (int l = 0; l < L_; l++) {
    BlockActs& a = blocks_[l];
    a.ln1 = bf16 ? shared_ln1 : take(N * C);
    a.ln1_mean = take(N); a.ln1_rstd = take(N);
    a.qkv = take(N * 3 * C);
    a.atty = take(N * C); a.att_lse = take(N * NH_);
    if (!par) {
      a.res_att = take(N * C);
      a.ln2 = bf16 ? shared_ln2 : take(N * C);
      a.ln2_mean = take(N); a.ln2_rstd = take(N);
    } else {
      a.res_att = a.ln2 = a.ln2_mean = a.ln2_rstd = nullptr;
    }
    a.fch = take(N * 4 * C);
    a.fch_gelu = bf16 ? nullptr : take(N * 4 * C);
    a.out = take(N * C);
  }
  lnf_ = take(N * C); lnf_mean_ = take(N); lnf_rstd_ = take(N);
  logits_ = take(N * Vp_);
  losses_ = take(N);
  dres_ = take(N * C); dln_ = take(N * C); dqkv_ = take(N * 3 * C); datty_ = take(N * C);
  dfch_ = take(N * 4 * C);
  MS_CHECK(p == acts_.data() + total, "GPT: activation layout mismatch");

  blocks_bf16_.assign(L_, BlockActsBf16{});
  if (!bf16) return;
  // bf16 copies of the GEMM inputs (per block ln1, atty, [ln2], fch_gelu; lnf) and the scratch
  // for a converted output gradient (the widest is the LM head's dlogits, N x Vp).
  const size_t per_block16 = N * (C + C + (par ? 0 : C) + 4 * C);
  const size_t dout_max = N * std::max<size_t>(Vp_, 4 * C);
  acts_bf16_.resize(per_block16 * L_ + N * C + dout_max);
  bf16_t* q = acts_bf16_.data();
  auto take16 = [&](size_t n) { bf16_t* r = q; q += n; return r; };
  for (int l = 0; l < L_; l++) {
    BlockActsBf16& b = blocks_bf16_[l];
    b.ln1 = take16(N * C);
    b.atty = take16(N * C);
    b.ln2 = par ? nullptr : take16(N * C);
    b.fch_gelu = take16(N * 4 * C);
  }
  lnf_bf16_ = take16(N * C);
  dout_bf16_ = take16(dout_max);
  MS_CHECK(q == acts_bf16_.data() + acts_bf16_.size(), "GPT: bf16 activation layout mismatch");
}

void GPT::init_weights(uint64_t seed) {
  bf16_weights_.mark_stale();
  params_.zero();
  for (size_t i = 0; i < specs_.size(); i++) {
    const ParamSpec& s = specs_[i];
    float* p = params_.data() + s.offset;
    size_t n = s.numel();
    if (s.init_std > 0) {
      Rng rng(seed, i);
      for (size_t j = 0; j < n; j++) p[j] = static_cast<float>(rng.normal() * s.init_std);
    } else if (s.kind == ParamKind::kNorm && s.name.ends_with(".weight")) {
      std::fill(p, p + n, 1.0f);
    }
  }
  // Padded vocabulary rows stay zero: no token id reaches them and their logits are masked.
  std::fill(params_.data() + wte_ + static_cast<size_t>(V_) * C_,
            params_.data() + wte_ + static_cast<size_t>(Vp_) * C_, 0.0f);
}

const ParamSpec& GPT::spec(const std::string& name) const {
  for (const ParamSpec& s : specs_)
    if (s.name == name) return s;
  MS_FAIL("GPT: no parameter named '{}'", name);
}

namespace {

// encoded (B,T,C) = wte[inputs] + wpe[0..T)
void encoder_forward(float* out, const int* inp, const float* wte, const float* wpe, int B, int T, int C) {
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T; t++) {
      float* o = out + (static_cast<size_t>(b) * T + t) * C;
      const float* we = wte + static_cast<size_t>(inp[b * T + t]) * C;
      const float* pe = wpe + static_cast<size_t>(t) * C;
#pragma omp simd
      for (int c = 0; c < C; c++) o[c] = we[c] + pe[c];
    }
}

// dwte[inputs] += dout, dwpe[t] += sum_b dout; parallel over channel blocks so every (row, c) is
// summed by one thread in (b, t) order: deterministic.
void encoder_backward(float* dwte, float* dwpe, const float* dout, const int* inp, int B, int T, int C) {
  constexpr int kBlock = 32;
  int nblocks = (C + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static)
  for (int blk = 0; blk < nblocks; blk++) {
    int c0 = blk * kBlock, c1 = std::min(C, c0 + kBlock);
    for (int b = 0; b < B; b++)
      for (int t = 0; t < T; t++) {
        const float* d = dout + (static_cast<size_t>(b) * T + t) * C;
        float* we = dwte + static_cast<size_t>(inp[b * T + t]) * C;
        float* pe = dwpe + static_cast<size_t>(t) * C;
        for (int c = c0; c < c1; c++) { we[c] += d[c]; pe[c] += d[c]; }
      }
  }
}

}  // namespace

float GPT::forward(const int* inputs, const int* targets, int B, int T, float dloss) {
  MS_CHECK(B > 0 && T > 0 && B <= maxB_ && T <= maxT_, "GPT::forward: B={} T={} exceeds the allocated {}x{}", B, T, maxB_, maxT_);
  MS_CHECK(dloss == 0.0f || targets, "GPT::forward: dloss needs targets");
  const int N = B * T, C = C_;
  for (int i = 0; i < N; i++)
    MS_CHECK(inputs[i] >= 0 && inputs[i] < V_, "GPT::forward: input token {} at {} is outside [0, {})", inputs[i], i, V_);
  std::copy(inputs, inputs + N, inputs_.data());
  if (targets) std::copy(targets, targets + N, targets_.data());
  B_ = B; T_ = T;
  const float* P = params_.data();
  float* Pm = params_.data();
  const bool bf16 = precision_ == DType::kBF16;
  const size_t first_block = L_ > 0 ? block_offset_[0] : lnf_w_;
  // bf16 weights are refreshed once per optimizer step: all at once, or, when a wrapper delivers
  // parameters range by range (param_wait), each range right after it arrives, so the conversion
  // follows the arrival of the gathered weights instead of waiting for all of them.
  const bool refresh_by_range = bf16 && bf16_weights_.stale() && param_wait_;
  if (bf16 && bf16_weights_.stale() && !param_wait_) refresh_bf16_weights();
  auto wait_params = [&](size_t lo, size_t hi) {
    if (!param_wait_) return;
    param_wait_(lo, hi);
    if (refresh_by_range) bf16_weights_.convert_range(params_.data(), lo, hi);
  };
  wait_params(0, first_block);
  encoder_forward(encoded_, inputs, P + wte_, P + wpe_, B, T, C);
  const float* x = encoded_;
  for (int l = 0; l < L_; l++) {
    wait_params(block_offset_[l], block_end(l));
    BlockParams p = block_params(Pm, l);
    BlockActs& a = blocks_[l];
    BlockActsBf16& ab = blocks_bf16_[l];  // all nullptr in fp32 mode
    const int W = cfg_.layer_window(l);
    layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, x, p.ln1_w, p.ln1_b, N, C);
    linear_forward(a.qkv, a.ln1, ab.ln1, /*convert_inp=*/true, p.qkv_w, p.qkv_b, N, C, 3 * C, false);
    attention_forward(a.atty, a.att_lse, a.qkv, B, T, C, NH_, W);
    const float* mlp_in;
    bf16_t* mlp_in_bf16;
    if (!cfg_.parallel_block()) {
      std::memcpy(a.res_att, x, sizeof(float) * N * C);
      linear_forward(a.res_att, a.atty, ab.atty, true, p.attn_proj_w, p.attn_proj_b, N, C, C, /*accumulate=*/true);
      layernorm_forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.res_att, p.ln2_w, p.ln2_b, N, C);
      std::memcpy(a.out, a.res_att, sizeof(float) * N * C);
      mlp_in = a.ln2;
      mlp_in_bf16 = ab.ln2;
      if (bf16) f32_to_bf16(ab.ln2, a.ln2, static_cast<size_t>(N) * C);
    } else {
      std::memcpy(a.out, x, sizeof(float) * N * C);
      linear_forward(a.out, a.atty, ab.atty, true, p.attn_proj_w, p.attn_proj_b, N, C, C, /*accumulate=*/true);
      mlp_in = a.ln1;  // the shared LayerNorm feeds both branches
      mlp_in_bf16 = ab.ln1;  // already converted for qkv
    }
    // bf16: the fc bias is fused into the GEMM (fp32 add); fp32 adds it in bias_gelu_forward.
    // GeLU is not fused: backward needs the pre-activation fch.
    linear_forward(a.fch, mlp_in, mlp_in_bf16, false, p.fc_w, bf16 ? p.fc_b : nullptr, N, C, 4 * C, false);
    if (bf16) {  // GeLU writes the bf16 GEMM input directly
      bias_gelu_forward_bf16(ab.fch_gelu, a.fch, nullptr, N, 4 * C);
    } else {
      bias_gelu_forward(a.fch_gelu, a.fch, p.fc_b, N, 4 * C);
    }
    linear_forward(a.out, a.fch_gelu, ab.fch_gelu, /*convert_inp=*/false, p.fc_proj_w, p.fc_proj_b, N, 4 * C, C,
                   /*accumulate=*/true);
    x = a.out;
  }
  wait_params(lnf_w_, params_.size());
  if (refresh_by_range) bf16_weights_.mark_fresh();  // every range converted
  layernorm_forward(lnf_, lnf_mean_, lnf_rstd_, x, P + lnf_w_, P + lnf_b_, N, C);
  linear_forward(logits_, lnf_, lnf_bf16_, true, P + wte_, nullptr, N, C, Vp_, false);
  have_dlogits_ = false;
  if (!targets) return 0.0f;
  if (bf16 && dloss != 0.0f) {  // the LM head's backward GEMMs read a bf16 gradient: write it directly
    softmax_cross_entropy_forward_backward_bf16(losses_, dout_bf16_, logits_, targets, N, V_, Vp_, dloss);
  } else {
    softmax_cross_entropy_forward_backward(losses_, dloss != 0.0f ? logits_ : nullptr, logits_,
                                           targets, N, V_, Vp_, dloss);
  }
  have_dlogits_ = dloss != 0.0f;
  double sum = 0;
  int count = 0;
  for (int i = 0; i < N; i++)
    if (targets[i] >= 0) { sum += losses_[i]; count++; }
  return count ? static_cast<float>(sum / count) : 0.0f;
}

void GPT::backward() {
  MS_CHECK(have_dlogits_, "GPT::backward: the last forward computed no gradient (dloss == 0 or no targets)");
  have_dlogits_ = false;
  const int B = B_, T = T_, N = B * T, C = C_;
  const float* P = params_.data();
  float* Pm = params_.data();
  float* G = grads_.data();
  const float* x_last = L_ > 0 ? blocks_[L_ - 1].out : encoded_;

  // LM head (tied to wte) and final LayerNorm.
  if (precision_ == DType::kBF16) {  // dlogits were written as bf16 by the fused cross-entropy
    const bf16_t* wb = bf16_weights_.data() + wte_;
    matmul_backward_bf16_from_bf16(dln_, G + wte_, dout_bf16_, lnf_bf16_, wb, N, C, Vp_, false);
  } else {
    linear_backward(dln_, G + wte_, nullptr, logits_, lnf_, lnf_bf16_, P + wte_, N, C, Vp_, false);
  }
  std::fill(dres_, dres_ + static_cast<size_t>(N) * C, 0.0f);
  layernorm_backward(dres_, G + lnf_w_, G + lnf_b_, dln_, x_last, P + lnf_w_, lnf_mean_, lnf_rstd_, N, C);
  if (grad_ready_) grad_ready_(lnf_w_, params_.size());

  for (int l = L_ - 1; l >= 0; l--) {
    BlockParams p = block_params(Pm, l);
    BlockParams g = block_params(G, l);
    BlockActs& a = blocks_[l];
    const BlockActsBf16& ab = blocks_bf16_[l];
    const float* x = l == 0 ? encoded_ : blocks_[l - 1].out;
    const int W = cfg_.layer_window(l);
    const bool par = cfg_.parallel_block();
    // MLP branch: dres is dLoss/d(block output).
    linear_backward(dfch_, g.fc_proj_w, g.fc_proj_b, dres_, a.fch_gelu, ab.fch_gelu, p.fc_proj_w, N, 4 * C, C, false);
    bias_gelu_backward(dfch_, g.fc_b, dfch_, a.fch, N, 4 * C);
    linear_backward(dln_, g.fc_w, nullptr, dfch_, par ? a.ln1 : a.ln2, par ? ab.ln1 : ab.ln2, p.fc_w, N, C, 4 * C, false);
    if (!par) {
      // dres += LN2 backward: dres becomes dLoss/d(res_att).
      layernorm_backward(dres_, g.ln2_w, g.ln2_b, dln_, a.res_att, p.ln2_w, a.ln2_mean, a.ln2_rstd, N, C);
    }
    // Attention branch.
    linear_backward(datty_, g.attn_proj_w, g.attn_proj_b, dres_, a.atty, ab.atty, p.attn_proj_w, N, C, C, false);
    attention_backward(dqkv_, datty_, a.qkv, a.atty, a.att_lse, B, T, C, NH_, W);
    // Parallel block: the shared LN's output gradient sums both branches.
    linear_backward(dln_, g.qkv_w, g.qkv_b, dqkv_, a.ln1, ab.ln1, p.qkv_w, N, C, 3 * C, /*accumulate=*/par);
    layernorm_backward(dres_, g.ln1_w, g.ln1_b, dln_, x, p.ln1_w, a.ln1_mean, a.ln1_rstd, N, C);
    if (grad_ready_) grad_ready_(block_offset_[l], block_end(l));
  }
  encoder_backward(G + wte_, G + wpe_, dres_, inputs_.data(), B, T, C);
  if (grad_ready_) grad_ready_(0, L_ > 0 ? block_offset_[0] : lnf_w_);
}

}  // namespace ms
