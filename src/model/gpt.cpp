// gpt.cpp: GPT construction, buffers, initialisation and the linear-layer helpers (see gpt.h for
// the dimension letters). The passes are in gpt_forward.cpp and gpt_backward.cpp.
#include "model/gpt.h"

#include <algorithm>  // std::max, std::fill
#include <vector>

#include "base/check.h"             // MS_CHECK
#include "base/log.h"               // logger
#include "base/rng.h"               // Rng
#include "kernels/attention.h"  // attention_bf16_on_dot_product_units
#include "kernels/backend.h"    // KernelBackend, kernels_for
#include "kernels/gemm_bf16.h"  // bf16_gemm_uses_amx
#include "kernels/rope.h"       // rope_table

namespace ms {

GPT::GPT(const ModelConfig& cfg, int maxB, int maxT, DType precision, const ModelShard& shard, int activation_slots,
         Device device)
    : cfg_(cfg), maxB_(maxB), maxT_(maxT), C_(cfg.n_embd), NH_(cfg.n_head),
      V_(cfg.vocab_size), Vp_(cfg.padded_vocab()), shard_(shard), k_(&kernels_for(device)),
      precision_(precision) {
  MS_CHECK(maxT <= cfg.max_seq_len, "GPT: sequence length {} exceeds model.max_seq_len={}", maxT, cfg.max_seq_len);
  MS_CHECK(activation_slots >= 1, "GPT: {} activation slots (at least 1)", activation_slots);
  // Checks that the parts divide the heads, key/value heads, F and Vp and that the layer range is a range.
  ParamLayout lay = build_param_layout(cfg, shard);
  l0_ = shard.layer_begin;
  has_emb_ = shard.has_embedding();
  has_head_ = shard.has_head(cfg.n_layer);
  const LocalDims d = local_dims(ActDims{cfg, maxB, maxT, precision, shard, activation_slots});
  L_ = d.L;
  NHl_ = d.NHl, NKVl_ = d.NKVl, HS_ = d.HS, Cl_ = d.Cl, QKVl_ = d.QKVl, Fl_ = d.Fl, FCl_ = d.FCl, Vl_ = d.Vl;
  v0_ = shard.index * Vl_;
  group_ = d.group;
  rows_exchanged_ = d.rows_exchanged;
  MS_CHECK(!rows_exchanged_ || maxT % shard.parts == 0, "GPT: sequence parallelism over {} parts needs a sequence "
           "length divisible by it (T={})", shard.parts, maxT);
  specs_ = std::move(lay.specs);
  block_offset_ = std::move(lay.block_offset);
  block_tensors_ = std::move(lay.blocks);
  const size_t off = lay.total;
  // lnf_w_ marks where the blocks end (block_end) also in a chunk without the head.
  wte_ = lay.wte, wpe_ = lay.wpe, lnf_w_ = has_head_ ? lay.lnf_w : lay.blocks_end, lnf_b_ = lay.lnf_b;
  head_ = cfg.tie_embeddings ? lay.wte : lay.head;
  has_wpe_ = lay.wpe < off, has_lnf_b_ = lay.lnf_b < off;
  params_.resize(off, device);
  grads_.resize(off, device);
  MS_CHECK(precision_ == DType::kF32 || precision_ == DType::kBF16, "GPT: precision {} is not fp32 or bf16",
           dtype_name(precision_));
  assign_activations(activation_slots);
  if (cfg.rope()) {  // the angle table, computed once on the host (kernels/rope.h)
    const size_t n = static_cast<size_t>(maxT) * (HS_ / 2);
    std::vector<float> c(n), s(n);
    rope_table(c.data(), s.data(), maxT, HS_, cfg.rope_theta);
    rope_cos_.resize(n, device);
    rope_sin_.resize(n, device);
    rope_cos_.upload(c.data(), n);
    rope_sin_.upload(s.data(), n);
  }
  if (precision_ == DType::kBF16) {
    bf16_weights_.resize(off, *k_);
    static bool noticed = false;  // one line per process
    if (device == Device::kCpu && !bf16_gemm_uses_amx() && !noticed) {
      noticed = true;
      logger().info("precision=bf16 without AMX-BF16: bf16 GEMMs run on {} (oneDNN), attention on {}; results "
                    "agree within bf16 rounding", bf16_gemm_isa(),
                    attention_bf16_on_dot_product_units() ? "AVX512-BF16" : "the fp32 kernels");
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
    k_->matmul_forward(out + r * OC, inp + r * C, weight, bias, hi - lo, C, OC, accumulate);
    return;
  }
  if (convert) k_->f32_to_bf16(inp16 + r * C, inp + r * C, static_cast<size_t>(hi - lo) * C);
  const bf16_t* wb = bf16_weights_.data() + (weight - params_.data());
  k_->matmul_forward_bf16(out + r * OC, inp16 + r * C, wb, bias, hi - lo, C, OC, accumulate);
}

void GPT::linear_data_grad_rows(float* dinp, const float* dout, bf16_t* dout16, bool convert, const float* weight,
                                int lo, int hi, int C, int OC, bool accumulate) {
  const size_t r = static_cast<size_t>(lo);
  if (precision_ == DType::kF32) {
    k_->gemm_f32(false, false, hi - lo, C, OC, dout + r * OC, weight, dinp + r * C, accumulate);
    return;
  }
  if (convert) k_->f32_to_bf16(dout16 + r * OC, dout + r * OC, static_cast<size_t>(hi - lo) * OC);
  const bf16_t* wb = bf16_weights_.data() + (weight - params_.data());
  k_->gemm_bf16(false, false, hi - lo, C, OC, dout16 + r * OC, wb, dinp + r * C, accumulate);
}

void GPT::linear_weight_grad(float* dweight, float* dbias, const float* dout, const bf16_t* dout16, const float* inp,
                             const bf16_t* inp16, int N, int C, int OC) {
  if (precision_ == DType::kF32) k_->gemm_f32(true, false, OC, C, N, dout, inp, dweight, true);
  else k_->gemm_bf16(true, false, OC, C, N, dout16, inp16, dweight, true);
  if (dbias) k_->add_column_sums(dbias, dout, N, OC);
}

BlockParams GPT::block_params(float* base, int l) const {
  const BlockOffsets& o = block_tensors_[l];
  auto at = [&](size_t off) { return off == kAbsent ? nullptr : base + off; };
  return BlockParams{at(o.ln1_w), at(o.ln1_b), at(o.qkv_w), at(o.qkv_b), at(o.attn_proj_w), at(o.attn_proj_b),
                     at(o.ln2_w), at(o.ln2_b), at(o.fc_w), at(o.fc_b), at(o.fc_proj_w), at(o.fc_proj_b)};
}

void GPT::norm_forward(float* out, float* mean, float* rstd, const float* in, const float* w, const float* b, int n) {
  if (cfg_.rmsnorm()) k_->rmsnorm_forward(out, rstd, in, w, n, C_, cfg_.norm_eps);
  else k_->layernorm_forward(out, mean, rstd, in, w, b, n, C_, cfg_.norm_eps);
}

void GPT::norm_backward(float* dinp, float* dw, float* db, const float* dout, const float* in, const float* w,
                        const float* mean, const float* rstd, int n) {
  if (cfg_.rmsnorm()) k_->rmsnorm_backward(dinp, dw, dout, in, w, rstd, n, C_);
  else k_->layernorm_backward(dinp, dw, db, dout, in, w, mean, rstd, n, C_);
}

void GPT::rope_rows(float* qkv, int lo, int hi, int T, bool backward) {
  if (!cfg_.rope() || lo == hi) return;
  if (backward) k_->rope_backward(qkv, rope_cos_.data(), rope_sin_.data(), lo, hi, T, NHl_, NKVl_, HS_);
  else k_->rope_forward(qkv, rope_cos_.data(), rope_sin_.data(), lo, hi, T, NHl_, NKVl_, HS_);
}

GPT::Footprint GPT::planned_footprint(const ModelConfig& cfg, int maxB, int maxT, DType precision,
                                      const ModelShard& shard, int activation_slots) {
  Footprint f;
  f.params = f.grads = build_param_layout(cfg, shard).total;
  const size_t Vl = static_cast<size_t>(cfg.padded_vocab()) / shard.parts;
  f.logits = shard.has_head(cfg.n_layer) ? static_cast<size_t>(maxB) * maxT * Vl * activation_slots : 0;
  const auto [f32, b16] = count_activations(ActDims{cfg, maxB, maxT, precision, shard, activation_slots});
  f.activations = f32 + b16 / 2;
  return f;
}

void GPT::assign_activations(int slots) {
  const auto [f32, b16] = count_activations(act_dims(slots));
  acts_.resize(f32, device());
  acts_bf16_.resize(b16, device());
  float* p = acts_.data();
  bf16_t* q = acts_bf16_.data();
  plan_activations(act_dims(slots), slots_, sc_,
                   [&](float** at, size_t count) { *at = p; p += count; },
                   [&](bf16_t** at, size_t count) { *at = q; q += count; });
  MS_CHECK(p == acts_.data() + f32 && q == acts_bf16_.data() + b16, "GPT: activation layout mismatch");
  const size_t N = static_cast<size_t>(maxB_) * maxT_;
  inputs_all_.resize(has_emb_ ? N * slots_.size() : 0, device());
  if (has_emb_)
    for (size_t k = 0; k < slots_.size(); k++) slots_[k].inputs = inputs_all_.data() + k * N;
  targets_.resize(has_head_ ? N : 0, device());
  slot_ = 0;
  a_ = &slots_[0];
}

void GPT::select_slot(int k) {
  MS_CHECK(k >= 0 && k < static_cast<int>(slots_.size()), "GPT: activation slot {} of {}", k, slots_.size());
  slot_ = k;
  a_ = &slots_[k];
}

GPT::Footprint GPT::footprint() const {
  Footprint f;
  f.params = params_.size();
  f.grads = grads_.size();
  f.logits = has_head_ ? static_cast<size_t>(maxB_) * maxT_ * Vl_ * slots_.size() : 0;
  f.activations = acts_.size() + acts_bf16_.size() / 2;
  return f;
}

void GPT::init_weights(uint64_t seed) {
  bf16_weights_.mark_stale();
  params_.zero();
  if (device() == Device::kCpu) {
    init_weights_host(seed, params_.data());
    return;
  }
  std::vector<float> host(params_.size(), 0.0f);
  init_weights_host(seed, host.data());
  params_.upload(host.data(), host.size());
}

void GPT::load_params(const float* host) {
  bf16_weights_.mark_stale();
  params_.upload(host, params_.size());
}

void GPT::copy_logits_to_host(int row, int rows, float* out) const {
  MS_CHECK(has_head_ && row >= 0 && rows >= 0 && row + rows <= a_->B * a_->T,
           "GPT: logits rows [{}, {}) of a {}x{} forward", row, row + rows, a_->B, a_->T);
  const size_t at = static_cast<size_t>(a_->logits - acts_.data()) + static_cast<size_t>(row) * Vl_;
  acts_.download(out, static_cast<size_t>(rows) * Vl_, at);
}

void GPT::init_weights_host(uint64_t seed, float* base) const {
  std::vector<float> full;
  for (size_t i = 0; i < specs_.size(); i++) {
    const ParamSpec& s = specs_[i];
    float* p = base + s.offset;
    if (s.init_std > 0) {
      // The whole tensor from its own stream, then this part's slice.
      full.resize(s.full_numel());
      Rng rng(seed, static_cast<uint64_t>(s.index));  // the whole model's stream of this tensor
      for (float& v : full) v = static_cast<float>(rng.normal() * s.init_std);
      if (s.offset == wte_ || s.offset == head_)  // padded vocabulary rows stay zero: no id reaches them
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
