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

namespace ms {

GPT::GPT(const ModelConfig& cfg, int maxB, int maxT, DType precision, const ModelShard& shard, int activation_slots,
         Device device)
    : cfg_(cfg), maxB_(maxB), maxT_(maxT), C_(cfg.n_embd), NH_(cfg.n_head),
      V_(cfg.vocab_size), Vp_(cfg.padded_vocab()), shard_(shard), k_(&kernels_for(device)),
      precision_(precision) {
  MS_CHECK(maxT <= cfg.max_seq_len, "GPT: sequence length {} exceeds model.max_seq_len={}", maxT, cfg.max_seq_len);
  MS_CHECK(activation_slots >= 1, "GPT: {} activation slots (at least 1)", activation_slots);
  // Checks that the parts divide heads, 4C and Vp and that the layer range is a range.
  ParamLayout lay = build_param_layout(cfg, shard);
  l0_ = shard.layer_begin;
  L_ = shard.end_layer(cfg.n_layer) - l0_;
  has_emb_ = shard.has_embedding();
  has_head_ = shard.has_head(cfg.n_layer);
  slots_.resize(activation_slots);
  const int P = shard.parts;
  NHl_ = NH_ / P, Cl_ = C_ / P, Fl_ = 4 * C_ / P, Vl_ = Vp_ / P, v0_ = shard.index * Vl_;
  rows_exchanged_ = P > 1 && shard.seq_sharded;
  MS_CHECK(!rows_exchanged_ || maxT % P == 0, "GPT: sequence parallelism over {} parts needs a sequence length "
           "divisible by it (T={})", P, maxT);
  specs_ = std::move(lay.specs);
  block_offset_ = std::move(lay.block_offset);
  // lnf_w_ marks where the blocks end (block_end) also in a chunk without the head.
  wte_ = lay.wte, wpe_ = lay.wpe, lnf_w_ = has_head_ ? lay.lnf_w : lay.blocks_end, lnf_b_ = lay.lnf_b;
  const size_t off = lay.total;
  params_.resize(off, device);
  grads_.resize(off, device);
  MS_CHECK(precision_ == DType::kF32 || precision_ == DType::kBF16, "GPT: precision {} is not fp32 or bf16",
           dtype_name(precision_));
  assign_activations();
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

namespace {

// Elements of GPT::assign_activations' fp32 buffer and of its bf16 one, from the arguments alone.
std::pair<size_t, size_t> activation_elements(const ModelConfig& cfg, int maxB, int maxT, DType precision,
                                              const ModelShard& shard, int slots) {
  const size_t P = shard.parts, N = static_cast<size_t>(maxB) * maxT, C = cfg.n_embd, Cl = C / P, Fl = 4 * C / P;
  const size_t Vl = static_cast<size_t>(cfg.padded_vocab()) / P, NHl = cfg.n_head / P;
  const size_t L = shard.end_layer(cfg.n_layer) - shard.layer_begin;
  const bool rows_exchanged = P > 1 && shard.seq_sharded, par = cfg.parallel_block(), bf16 = precision == DType::kBF16;
  const bool split = P > 1, head = shard.has_head(cfg.n_layer);
  const size_t n = rows_exchanged ? N / P : N;
  size_t block = 2 * n + N * 3 * Cl + N * Cl + N * NHl + N * Fl + n * C;  // ln1 stats, qkv, atty, lse, fch, out
  if (!bf16) block += N * C + N * Fl;                                     // ln1, fch_gelu
  if (!par) block += n * C + 2 * n + (bf16 ? 0 : N * C);                  // res_att, ln2 stats, ln2
  size_t slot = n * C + L * block + (head ? N * C + 2 * n + N * Vl + N : 0);
  size_t f32 = slots * slot + (rows_exchanged ? n * C : 0) + (bf16 ? N * C * (par ? 1 : 2) : 0);
  if (split && head) f32 += 3 * N;
  if (split) f32 += N * C + n * C;
  f32 += n * C + (rows_exchanged ? N * C : 0) + N * C + N * 3 * Cl + N * Cl + N * Fl;
  size_t b16 = 0;
  if (bf16) {
    const size_t per_slot = N * (C + Cl + (par ? 0 : C) + Fl) * L + (head ? N * C + N * Vl : 0);
    b16 = per_slot * slots + N * std::max(C, Fl) + N * 3 * Cl;
  }
  return {f32, b16};
}

}  // namespace

GPT::Footprint GPT::planned_footprint(const ModelConfig& cfg, int maxB, int maxT, DType precision,
                                      const ModelShard& shard, int activation_slots) {
  Footprint f;
  f.params = f.grads = build_param_layout(cfg, shard).total;
  const size_t Vl = static_cast<size_t>(cfg.padded_vocab()) / shard.parts;
  f.logits = shard.has_head(cfg.n_layer) ? static_cast<size_t>(maxB) * maxT * Vl * activation_slots : 0;
  const auto [f32, b16] = activation_elements(cfg, maxB, maxT, precision, shard, activation_slots);
  f.activations = f32 + b16 / 2;
  return f;
}

void GPT::assign_activations() {
  const size_t N = static_cast<size_t>(maxB_) * maxT_, C = C_, Cl = Cl_, Fl = Fl_, Vl = Vl_;
  const size_t n = rows_exchanged_ ? N / shard_.parts : N;
  const bool par = cfg_.parallel_block();
  const bool bf16 = precision_ == DType::kBF16;
  const bool split = shard_.parts > 1;
  // In bf16 mode the fp32 ln1 and ln2 (all rows) are only GEMM inputs (the backward reads their
  // bf16 copies), so one shared fp32 scratch of each serves every layer and slot; GeLU writes its
  // bf16 output directly and has no fp32 buffer at all (fch_gelu is nullptr). What a backward reads
  // is per slot; the rest (forward and backward scratch) is shared.
  std::vector<std::pair<float**, size_t>> plan;  // (pointer to set, elements), carved in order
  auto want = [&](float** p, size_t count) { plan.emplace_back(p, count); };
  float *shared_ln1 = nullptr, *shared_ln2 = nullptr;
  for (ActSlot& sl : slots_) {
    want(&sl.encoded, n * C);
    sl.blocks.assign(L_, BlockActs{});
    for (BlockActs& a : sl.blocks) {
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
    if (has_head_) {
      want(&sl.lnf, N * C); want(&sl.lnf_mean, n); want(&sl.lnf_rstd, n);
      want(&sl.logits, N * Vl);
      want(&sl.losses, N);
    }
  }
  if (rows_exchanged_) want(&ln_local_, n * C);
  if (bf16) {
    want(&shared_ln1, N * C);
    if (!par) want(&shared_ln2, N * C);
  }
  if (split && has_head_) { want(&ce_max_, N); want(&ce_sums_, 2 * N); }
  if (split) {
    want(&partial_, N * C);
    want(&dln_local_, n * C);
  }
  want(&dres_, n * C);
  if (rows_exchanged_) want(&dres_full_, N * C);
  want(&dln_, N * C); want(&dqkv_, N * 3 * Cl); want(&datty_, N * Cl); want(&dfch_, N * Fl);
  size_t total = 0;
  for (const auto& w : plan) total += w.second;
  const auto planned = activation_elements(cfg_, maxB_, maxT_, precision_, shard_, static_cast<int>(slots_.size()));
  MS_CHECK(total == planned.first, "GPT: {} fp32 activation elements, planned_footprint says {}", total,
           planned.first);
  acts_.resize(total, device());
  float* p = acts_.data();
  for (const auto& [ptr, count] : plan) { *ptr = p; p += count; }
  for (ActSlot& sl : slots_)
    for (BlockActs& a : sl.blocks)
      if (bf16) { a.ln1 = shared_ln1; a.ln2 = shared_ln2; }
  if (!rows_exchanged_) dres_full_ = dres_;
  if (!split) dln_local_ = dln_;
  inputs_all_.resize(has_emb_ ? N * slots_.size() : 0, device());
  if (has_emb_)
    for (size_t k = 0; k < slots_.size(); k++) slots_[k].inputs = inputs_all_.data() + k * N;
  targets_.resize(has_head_ ? N : 0, device());

  if (bf16) {
    // bf16 copies of the GEMM inputs (per block ln1, atty, [ln2], fch_gelu; lnf) and the bf16
    // dlogits, per slot; the converted output gradients, shared.
    const size_t per_block16 = N * (C + Cl + (par ? 0 : C) + Fl);
    const size_t per_slot16 = per_block16 * L_ + (has_head_ ? N * C + N * Vl : 0);
    const size_t dout_max = N * std::max(C, Fl);
    acts_bf16_.resize(per_slot16 * slots_.size() + dout_max + N * 3 * Cl, device());
    MS_CHECK(acts_bf16_.size() == planned.second, "GPT: {} bf16 activation elements, planned_footprint says {}",
             acts_bf16_.size(), planned.second);
    bf16_t* q = acts_bf16_.data();
    auto take16 = [&](size_t count) { bf16_t* r = q; q += count; return r; };
    for (ActSlot& sl : slots_) {
      sl.blocks_bf16.assign(L_, BlockActsBf16{});
      for (BlockActsBf16& b : sl.blocks_bf16) {
        b.ln1 = take16(N * C);
        b.atty = take16(N * Cl);
        b.ln2 = par ? nullptr : take16(N * C);
        b.fch_gelu = take16(N * Fl);
      }
      if (has_head_) {
        sl.lnf_bf16 = take16(N * C);
        sl.dlogits_bf16 = take16(N * Vl);
      }
    }
    dout_bf16_ = take16(dout_max);
    dqkv_bf16_ = take16(N * 3 * Cl);
    MS_CHECK(q == acts_bf16_.data() + acts_bf16_.size(), "GPT: bf16 activation layout mismatch");
  } else {
    for (ActSlot& sl : slots_) sl.blocks_bf16.assign(L_, BlockActsBf16{});
  }
  slot_ = 0;
  const ActSlot& s0 = slots_[0];
  encoded_ = s0.encoded, blocks_ = s0.blocks, lnf_ = s0.lnf, lnf_mean_ = s0.lnf_mean, lnf_rstd_ = s0.lnf_rstd;
  logits_ = s0.logits, losses_ = s0.losses, blocks_bf16_ = s0.blocks_bf16, lnf_bf16_ = s0.lnf_bf16;
  dlogits_bf16_ = s0.dlogits_bf16, inputs_ = s0.inputs;
}

void GPT::select_slot(int k) {
  MS_CHECK(k >= 0 && k < static_cast<int>(slots_.size()), "GPT: activation slot {} of {}", k, slots_.size());
  if (k == slot_) return;
  ActSlot& cur = slots_[slot_];
  cur.B = B_, cur.T = T_, cur.have_dlogits = have_dlogits_;
  const ActSlot& s = slots_[k];
  encoded_ = s.encoded, lnf_ = s.lnf, lnf_mean_ = s.lnf_mean, lnf_rstd_ = s.lnf_rstd;
  logits_ = s.logits, losses_ = s.losses, lnf_bf16_ = s.lnf_bf16, dlogits_bf16_ = s.dlogits_bf16;
  inputs_ = s.inputs;
  std::copy(s.blocks.begin(), s.blocks.end(), blocks_.begin());  // same sizes: no allocation
  std::copy(s.blocks_bf16.begin(), s.blocks_bf16.end(), blocks_bf16_.begin());
  B_ = s.B, T_ = s.T, have_dlogits_ = s.have_dlogits;
  slot_ = k;
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
  MS_CHECK(has_head_ && row >= 0 && rows >= 0 && row + rows <= B_ * T_, "GPT: logits rows [{}, {}) of a {}x{} forward",
           row, row + rows, B_, T_);
  const size_t at = static_cast<size_t>(logits_ - acts_.data()) + static_cast<size_t>(row) * Vl_;
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
      if (s.name == kTokenEmbeddingName)  // padded vocabulary rows stay zero: no id reaches them
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
