// gpt.cpp: GPT construction, buffers, initialisation and the linear-layer helpers (see gpt.h for
// the dimension letters). The passes are in gpt_forward.cpp and gpt_backward.cpp.
#include "model/gpt.h"

#include <algorithm>  // std::max, std::fill
#include <vector>

#include "base/check.h"             // MS_CHECK
#include "base/log.h"               // logger
#include "base/rng.h"               // Rng
#include "kernels/bf16_convert.h"   // f32_to_bf16
#include "kernels/gemm_bf16.h"      // gemm_bf16, matmul_forward_bf16
#include "kernels/matmul.h"         // matmul_forward, sgemm, add_column_sums

namespace ms {

GPT::GPT(const ModelConfig& cfg, int maxB, int maxT, DType precision, const ModelShard& shard)
    : cfg_(cfg), maxB_(maxB), maxT_(maxT), L_(cfg.n_layer), C_(cfg.n_embd), NH_(cfg.n_head),
      V_(cfg.vocab_size), Vp_(cfg.padded_vocab()), shard_(shard), precision_(precision) {
  MS_CHECK(maxT <= cfg.max_seq_len, "GPT: sequence length {} exceeds model.max_seq_len={}", maxT, cfg.max_seq_len);
  ParamLayout lay = build_param_layout(cfg, shard);  // checks that the parts divide heads, 4C and Vp
  const int P = shard.parts;
  NHl_ = NH_ / P, Cl_ = C_ / P, Fl_ = 4 * C_ / P, Vl_ = Vp_ / P, v0_ = shard.index * Vl_;
  rows_exchanged_ = P > 1 && shard.seq_sharded;
  MS_CHECK(!rows_exchanged_ || maxT % P == 0, "GPT: sequence parallelism over {} parts needs a sequence length "
           "divisible by it (T={})", P, maxT);
  specs_ = std::move(lay.specs);
  block_offset_ = std::move(lay.block_offset);
  wte_ = lay.wte, wpe_ = lay.wpe, lnf_w_ = lay.lnf_w, lnf_b_ = lay.lnf_b;
  const size_t off = lay.total;
  params_.resize(off);
  grads_.resize(off);
  MS_CHECK(precision_ == DType::kF32 || precision_ == DType::kBF16, "GPT: precision {} is not fp32 or bf16",
           dtype_name(precision_));
  assign_activations();
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

int GPT::local_rows(int B, int T) const { return rows_exchanged_ ? B * T / shard_.parts : B * T; }

void GPT::refresh_bf16_weights() {
  if (precision_ != DType::kBF16) return;
  bf16_weights_.refresh(params_.data());
}

void GPT::linear_rows(float* out, const float* inp, bf16_t* inp16, bool convert, const float* weight,
                      const float* bias, int lo, int hi, int C, int OC, bool accumulate) {
  const size_t r = static_cast<size_t>(lo);
  if (precision_ == DType::kF32) {
    matmul_forward(out + r * OC, inp + r * C, weight, bias, hi - lo, C, OC, accumulate);
    return;
  }
  if (convert) f32_to_bf16(inp16 + r * C, inp + r * C, static_cast<size_t>(hi - lo) * C);
  const bf16_t* wb = bf16_weights_.data() + (weight - params_.data());
  matmul_forward_bf16(out + r * OC, inp16 + r * C, wb, bias, hi - lo, C, OC, accumulate);
}

void GPT::linear_data_grad_rows(float* dinp, const float* dout, bf16_t* dout16, bool convert, const float* weight,
                                int lo, int hi, int C, int OC, bool accumulate) {
  const size_t r = static_cast<size_t>(lo);
  if (precision_ == DType::kF32) {
    sgemm(false, false, hi - lo, C, OC, 1.0f, dout + r * OC, OC, weight, C, accumulate ? 1.0f : 0.0f, dinp + r * C, C);
    return;
  }
  if (convert) f32_to_bf16(dout16 + r * OC, dout + r * OC, static_cast<size_t>(hi - lo) * OC);
  const bf16_t* wb = bf16_weights_.data() + (weight - params_.data());
  gemm_bf16(false, false, hi - lo, C, OC, dout16 + r * OC, wb, nullptr, dinp + r * C, accumulate);
}

void GPT::linear_weight_grad(float* dweight, float* dbias, const float* dout, const bf16_t* dout16, const float* inp,
                             const bf16_t* inp16, int N, int C, int OC) {
  if (precision_ == DType::kF32) sgemm(true, false, OC, C, N, 1.0f, dout, OC, inp, C, 1.0f, dweight, C);
  else gemm_bf16(true, false, OC, C, N, dout16, inp16, nullptr, dweight, true);
  if (dbias) add_column_sums(dbias, dout, N, OC);
}

BlockParams GPT::block_params(float* base, int l) const {
  const size_t C = C_, Cl = Cl_, Fl = Fl_;
  float* p = base + block_offset_[l];
  BlockParams b{};
  auto take = [&](size_t n) { float* r = p; p += n; return r; };
  b.ln1_w = take(C); b.ln1_b = take(C);
  b.qkv_w = take(3 * Cl * C); b.qkv_b = take(3 * Cl);
  b.attn_proj_w = take(C * Cl); b.attn_proj_b = take(C);
  if (!cfg_.parallel_block()) { b.ln2_w = take(C); b.ln2_b = take(C); }
  else { b.ln2_w = b.ln2_b = nullptr; }
  b.fc_w = take(Fl * C); b.fc_b = take(Fl);
  b.fc_proj_w = take(C * Fl); b.fc_proj_b = take(C);
  return b;
}

void GPT::assign_activations() {
  const size_t N = static_cast<size_t>(maxB_) * maxT_, C = C_, Cl = Cl_, Fl = Fl_, Vl = Vl_;
  const size_t n = rows_exchanged_ ? N / shard_.parts : N;
  const bool par = cfg_.parallel_block();
  const bool bf16 = precision_ == DType::kBF16;
  const bool split = shard_.parts > 1;
  // In bf16 mode the fp32 ln1 and ln2 (all rows) are only GEMM inputs (the backward reads their
  // bf16 copies), so one shared fp32 scratch of each serves every layer; GeLU writes its bf16
  // output directly and has no fp32 buffer at all (fch_gelu is nullptr).
  std::vector<std::pair<float**, size_t>> plan;  // (pointer to set, elements), carved in order
  auto want = [&](float** p, size_t count) { plan.emplace_back(p, count); };
  float *shared_ln1 = nullptr, *shared_ln2 = nullptr;
  want(&encoded_, n * C);
  if (rows_exchanged_) want(&ln_local_, n * C);
  if (bf16) {
    want(&shared_ln1, N * C);
    if (!par) want(&shared_ln2, N * C);
  }
  blocks_.assign(L_, BlockActs{});
  for (int l = 0; l < L_; l++) {
    BlockActs& a = blocks_[l];
    if (!bf16) want(&a.ln1, N * C);
    want(&a.ln1_mean, n); want(&a.ln1_rstd, n);
    want(&a.qkv, N * 3 * Cl);
    want(&a.atty, N * Cl); want(&a.att_lse, N * NHl_);
    if (!par) {
      want(&a.res_att, n * C);
      if (!bf16) want(&a.ln2, N * C);
      want(&a.ln2_mean, n); want(&a.ln2_rstd, n);
    }
    want(&a.fch, N * Fl);
    if (!bf16) want(&a.fch_gelu, N * Fl);
    want(&a.out, n * C);
  }
  want(&lnf_, N * C); want(&lnf_mean_, n); want(&lnf_rstd_, n);
  want(&logits_, N * Vl);
  want(&losses_, N);
  if (split) {
    want(&ce_max_, N); want(&ce_sums_, 2 * N);
    want(&partial_, N * C);
    want(&dln_local_, n * C);
  }
  want(&dres_, n * C);
  if (rows_exchanged_) want(&dres_full_, N * C);
  want(&dln_, N * C); want(&dqkv_, N * 3 * Cl); want(&datty_, N * Cl); want(&dfch_, N * Fl);
  size_t total = 0;
  for (const auto& w : plan) total += w.second;
  acts_.resize(total);
  float* p = acts_.data();
  for (const auto& [ptr, count] : plan) { *ptr = p; p += count; }
  for (BlockActs& a : blocks_)
    if (bf16) { a.ln1 = shared_ln1; a.ln2 = shared_ln2; }
  if (!rows_exchanged_) dres_full_ = dres_;
  if (!split) dln_local_ = dln_;
  inputs_.resize(N);
  targets_.resize(N);

  blocks_bf16_.assign(L_, BlockActsBf16{});
  if (!bf16) return;
  // bf16 copies of the GEMM inputs (per block ln1, atty, [ln2], fch_gelu; lnf), the bf16 dlogits
  // and the converted output gradients.
  const size_t per_block16 = N * (C + Cl + (par ? 0 : C) + Fl);
  const size_t dout_max = N * std::max(C, Fl);
  acts_bf16_.resize(per_block16 * L_ + N * C + N * Vl + dout_max + N * 3 * Cl);
  bf16_t* q = acts_bf16_.data();
  auto take16 = [&](size_t count) { bf16_t* r = q; q += count; return r; };
  for (int l = 0; l < L_; l++) {
    BlockActsBf16& b = blocks_bf16_[l];
    b.ln1 = take16(N * C);
    b.atty = take16(N * Cl);
    b.ln2 = par ? nullptr : take16(N * C);
    b.fch_gelu = take16(N * Fl);
  }
  lnf_bf16_ = take16(N * C);
  dlogits_bf16_ = take16(N * Vl);
  dout_bf16_ = take16(dout_max);
  dqkv_bf16_ = take16(N * 3 * Cl);
  MS_CHECK(q == acts_bf16_.data() + acts_bf16_.size(), "GPT: bf16 activation layout mismatch");
}

GPT::Footprint GPT::footprint() const {
  Footprint f;
  f.params = params_.size();
  f.grads = grads_.size();
  f.logits = static_cast<size_t>(maxB_) * maxT_ * Vl_;
  f.activations = acts_.size() + acts_bf16_.size() / 2;
  return f;
}

void GPT::init_weights(uint64_t seed) {
  bf16_weights_.mark_stale();
  params_.zero();
  std::vector<float> full;
  for (size_t i = 0; i < specs_.size(); i++) {
    const ParamSpec& s = specs_[i];
    float* p = params_.data() + s.offset;
    if (s.init_std > 0) {
      // The whole tensor from its own stream, then this part's slice.
      full.resize(s.full_numel());
      Rng rng(seed, i);
      for (float& v : full) v = static_cast<float>(rng.normal() * s.init_std);
      if (s.name == "transformer.wte.weight")  // padded vocabulary rows stay zero: no id reaches them
        std::fill(full.begin() + static_cast<size_t>(V_) * C_, full.end(), 0.0f);
      slice_param(s, shard_.parts, shard_.index, full.data(), p);
    } else if (s.kind == ParamKind::kNorm && s.name.ends_with(".weight")) {
      std::fill(p, p + s.numel(), 1.0f);
    }
  }
}

const ParamSpec& GPT::spec(const std::string& name) const {
  for (const ParamSpec& s : specs_)
    if (s.name == name) return s;
  MS_FAIL("GPT: no parameter named '{}'", name);
}

}  // namespace ms
