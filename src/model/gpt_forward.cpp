// gpt_forward.cpp: GPT::forward, layer by layer (see gpt.h for the dimension letters and the
// tensor-parallel regions). Every region is written once: with one part each gather_rows /
// reduce_rows is an identity that runs its callback over all rows.
#include "base/check.h"        // MS_CHECK
#include "kernels/backend.h"   // KernelBackend
#include "model/gpt.h"

namespace ms {

// encoded (n,C) = wte[inputs] (+ wpe[position] with learned positions) for this part's rows. The
// token embedding is vocabulary-parallel: each part looks up the ids it holds (zero rows for the
// others) for all N rows, and reduce_rows sums the parts.
void GPT::embedding_forward(const int* inputs, int B, int T) {
  const int n = local_rows(B, T), C = C_;
  const float* wte = params_.data() + wte_;
  float* encoded = a_->encoded;
  float* part = partial_for(encoded);
  const int v0 = v0_, v1 = v0_ + Vl_;
  regions_->reduce_rows(part, encoded, n, C, /*accumulate=*/false, [&](int lo, int hi) {
    k_->embedding_lookup(part, inputs, wte, lo, hi, C, v0, v1);
  }, [] {});
  if (!has_wpe_) return;
  const int row0 = rows_exchanged_ ? shard_.index * n : 0;
  k_->add_position_embedding(encoded, params_.data() + wpe_, n, C, T, row0);
}

void GPT::attention_core(int l, int B, int T) {
  BlockActs& a = a_->blocks[l];
  k_->attention_forward(precision_ == DType::kBF16, a.atty, a.att_lse, a.qkv, B, T, Cl_, NHl_, NKVl_,
                        cfg_.layer_window(l0_ + l));
}

void GPT::block_forward(int l, const float* x, int B, int T) {
  const int N = B * T, n = local_rows(B, T), C = C_, Cl = Cl_, Fl = Fl_, FCl = FCl_, QKVl = QKVl_;
  const bool bf16 = precision_ == DType::kBF16, swiglu = cfg_.swiglu();
  BlockParams p = block_params(params_.data(), l);
  BlockActs& a = a_->blocks[l];
  BlockActsBf16& ab = a_->blocks_bf16[l];  // all nullptr in fp32 mode
  // The norm on this part's rows, written where gather_rows expects them: its own buffer when rows
  // are exchanged (the gathered rows then land in `full`), else `full` itself.
  auto norm_in = [&](float* full, float* mean, float* rstd, const float* in, const float* w, const float* b) {
    float* own = rows_exchanged_ ? sc_.ln_local : full;
    norm_forward(own, mean, rstd, in, w, b, n);
    return own;
  };
  // The MLP: fc on rows as they arrive (fused with the gather), the activation and fc_proj on rows
  // before they leave (fused with the reduce). fc's bias is fused into the GEMM in bf16 mode and
  // for SwiGLU; GeLU in fp32 adds it itself. The activation writes the bf16 GEMM input directly in
  // bf16 mode. It is not fused into fc: backward needs the pre-activation fch.
  auto fc_rows = [&](const float* in, bf16_t* in16, int lo, int hi) {  // converts its rows of in16
    linear_rows(a.fch, in, in16, bf16, p.fc_w, bf16 || swiglu ? p.fc_b : nullptr, lo, hi, C, FCl, false);
  };
  auto act_fc_proj_rows = [&](float* part, bool accumulate, int lo, int hi) {
    const size_t r = static_cast<size_t>(lo) * Fl, rc = static_cast<size_t>(lo) * FCl;
    if (swiglu && bf16) k_->swiglu_forward_bf16(ab.fch_gelu + r, a.fch + rc, hi - lo, Fl);
    else if (swiglu) k_->swiglu_forward(a.fch_gelu + r, a.fch + rc, hi - lo, Fl);
    else if (bf16) k_->bias_gelu_forward_bf16(ab.fch_gelu + r, a.fch + r, nullptr, hi - lo, Fl);
    else k_->bias_gelu_forward(a.fch_gelu + r, a.fch + r, p.fc_b, hi - lo, Fl);
    linear_rows(part, a.fch_gelu, ab.fch_gelu, false, p.fc_proj_w, row_parallel_bias(p.fc_proj_b), lo, hi, Fl, C,
                accumulate);
  };
  // The attention core; selective recomputation keeps none of its output (shared buffers), so the
  // projection converts it to bf16 itself.
  auto qkv_rows = [&](const float* in, bf16_t* in16, bool convert, int lo, int hi) {
    linear_rows(a.qkv, in, in16, convert, p.qkv_w, p.qkv_b, lo, hi, C, QKVl, false);
    rope_rows(a.qkv, lo, hi, T, /*backward=*/false);
  };
  const float* ln1 = norm_in(a.ln1, a.ln1_mean, a.ln1_rstd, x, p.ln1_w, p.ln1_b);
  if (cfg_.parallel_block()) {
    // One gather feeds both branches (MegaScale Fig. 3): fused with the MLP's fc; the attention
    // path reuses the gathered rows.
    // (Rows arrive in a.ln1 whether or not they are exchanged: see norm_in.)
    ln1 = regions_->gather_rows(ln1, a.ln1, n, C, [&](int lo, int hi) { fc_rows(a.ln1, ab.ln1, lo, hi); });
    qkv_rows(ln1, ab.ln1, /*convert=*/false, 0, N);
    attention_core(l, B, T);
    // out = x + attention + MLP: one part adds them onto x directly; parts sum partials first.
    k_->copy(a.out, x, static_cast<size_t>(n) * C);
    float* part = partial_for(a.out);
    linear_rows(part, a.atty, ab.atty, true, p.attn_proj_w, row_parallel_bias(p.attn_proj_b), 0, N, Cl, C,
                /*accumulate=*/part == a.out);
    regions_->reduce_rows(part, a.out, n, C, /*accumulate=*/true,
                          [&](int lo, int hi) { act_fc_proj_rows(part, true, lo, hi); }, [] {});
    return;
  }
  // Sequential block: attention sub-block, then MLP sub-block, each with its own gather / reduce.
  ln1 = regions_->gather_rows(ln1, a.ln1, n, C, [&](int lo, int hi) { qkv_rows(a.ln1, ab.ln1, bf16, lo, hi); });
  attention_core(l, B, T);
  k_->copy(a.res_att, x, static_cast<size_t>(n) * C);
  float* part = partial_for(a.res_att);
  regions_->reduce_rows(part, a.res_att, n, C, /*accumulate=*/true, [&](int lo, int hi) {
    linear_rows(part, a.atty, ab.atty, bf16, p.attn_proj_w, row_parallel_bias(p.attn_proj_b), lo, hi, Cl, C,
                part == a.res_att);
  }, [] {});
  const float* ln2 = norm_in(a.ln2, a.ln2_mean, a.ln2_rstd, a.res_att, p.ln2_w, p.ln2_b);
  regions_->gather_rows(ln2, a.ln2, n, C, [&](int lo, int hi) { fc_rows(a.ln2, ab.ln2, lo, hi); });
  k_->copy(a.out, a.res_att, static_cast<size_t>(n) * C);
  part = partial_for(a.out);
  regions_->reduce_rows(part, a.out, n, C, /*accumulate=*/true,
                        [&](int lo, int hi) { act_fc_proj_rows(part, part == a.out, lo, hi); }, [] {});
}

void GPT::lm_head_forward(const float* x, int N) {
  const int n = local_rows(1, N), C = C_;
  const float* P = params_.data();
  ActSlot& s = *a_;
  float* own = rows_exchanged_ ? sc_.ln_local : s.lnf;
  norm_forward(own, s.lnf_mean, s.lnf_rstd, x, P + lnf_w_, has_lnf_b_ ? P + lnf_b_ : nullptr, n);
  // The LM head (the vocabulary-parallel token embedding when tied): logits (N, Vl) for all rows.
  const float* lnf = regions_->gather_rows(own, s.lnf, n, C, [&](int lo, int hi) {
    linear_rows(s.logits, s.lnf, s.lnf_bf16, precision_ == DType::kBF16, P + head_, nullptr, lo, hi, C, Vl_, false);
  });
  MS_CHECK(lnf == s.lnf, "GPT: LM head input is not the gathered buffer");
}

float GPT::cross_entropy(const int* targets, const int* host_targets, int N, float dloss) {
  const bool bf16_grad = precision_ == DType::kBF16 && dloss != 0.0f;  // the LM head's backward reads bf16
  float *losses = a_->losses, *logits = a_->logits;
  bf16_t* dlogits16 = a_->dlogits_bf16;
  if (shard_.parts == 1) {
    if (bf16_grad) {
      k_->softmax_cross_entropy_bf16(losses, dlogits16, logits, targets, N, V_, Vp_, dloss);
    } else {
      k_->softmax_cross_entropy(losses, dloss != 0.0f ? logits : nullptr, logits, targets, N, V_, Vp_, dloss);
    }
  } else {  // vocabulary-parallel: max, then sum-exp and target logit, reduced over the parts
    k_->vocab_shard_row_max(sc_.ce_max, logits, targets, N, V_, Vl_, v0_);
    regions_->all_reduce_max(sc_.ce_max, static_cast<size_t>(N));
    k_->vocab_shard_sum_exp(sc_.ce_sums, logits, sc_.ce_max, targets, N, V_, Vl_, v0_);
    regions_->all_reduce_sum(sc_.ce_sums, 2 * static_cast<size_t>(N));
    if (bf16_grad)
      k_->vocab_shard_loss_grad_bf16(losses, dlogits16, logits, sc_.ce_max, sc_.ce_sums, targets, N, V_, Vl_, v0_,
                                     dloss);
    else
      k_->vocab_shard_loss_grad(losses, dloss != 0.0f ? logits : nullptr, logits, sc_.ce_max, sc_.ce_sums, targets,
                                N, V_, Vl_, v0_, dloss);
  }
  a_->have_dlogits = dloss != 0.0f;
  return k_->masked_loss_mean(losses, host_targets, N);
}

float GPT::forward(const int* inputs, const int* targets, int B, int T, float dloss) {
  MS_CHECK(B > 0 && T > 0 && B <= maxB_ && T <= maxT_, "GPT::forward: B={} T={} exceeds the allocated {}x{}", B, T, maxB_, maxT_);
  MS_CHECK(dloss == 0.0f || targets || !has_head_, "GPT::forward: dloss needs targets");
  MS_CHECK(!rows_exchanged_ || T % shard_.parts == 0, "GPT::forward: T={} is not divisible by the {} sequence-parallel parts",
           T, shard_.parts);
  MS_CHECK(has_emb_ == (inputs != nullptr), "GPT::forward: a chunk {} the embedding takes {} token ids",
           has_emb_ ? "with" : "without", has_emb_ ? "its" : "no");
  const int N = B * T;
  if (has_emb_) {
    for (int i = 0; i < N; i++)
      MS_CHECK(inputs[i] >= 0 && inputs[i] < V_, "GPT::forward: input token {} at {} is outside [0, {})", inputs[i], i, V_);
    copy_bytes(a_->inputs, device(), inputs, Device::kCpu, sizeof(int) * static_cast<size_t>(N), k_->stream());
  }
  // The CPU cross-entropy validates targets itself; a device kernel cannot throw, so they are checked here.
  if (targets && has_head_ && device() != Device::kCpu)
    for (int i = 0; i < N; i++)
      MS_CHECK(targets[i] >= -1 && targets[i] < V_, "GPT::forward: target {} at {} is outside [0, {}) (or -1: ignored)",
               targets[i], i, V_);
  if (targets && has_head_)
    copy_bytes(targets_.data(), device(), targets, Device::kCpu, sizeof(int) * static_cast<size_t>(N), k_->stream());
  a_->B = B, a_->T = T;
  const bool bf16 = precision_ == DType::kBF16;
  const size_t first_block = L_ > 0 ? block_offset_[0] : lnf_w_;
  // bf16 weights are refreshed once per optimizer step: all at once, or, when a wrapper delivers
  // parameters range by range (param_wait), each range right after it arrives, so the conversion
  // follows the arrival of the gathered weights instead of waiting for all of them.
  const bool refresh_by_range = bf16 && bf16_weights_.stale() && param_wait_;
  if (bf16 && bf16_weights_.stale() && !param_wait_) refresh_bf16_weights();
  auto wait_params = [&](size_t lo, size_t hi) {
    if (!param_wait_ || lo == hi) return;
    param_wait_(lo, hi);
    if (refresh_by_range) bf16_weights_.convert_range(params_.data(), lo, hi);
  };
  wait_params(0, first_block);  // embeddings (a chunk with only the head: its token embedding copy)
  if (has_emb_) embedding_forward(a_->inputs, B, T);
  const float* x = a_->encoded;  // a chunk without the embedding: the caller wrote its input here
  for (int l = 0; l < L_; l++) {
    wait_params(block_offset_[l], block_end(l));
    block_forward(l, x, B, T);
    x = a_->blocks[l].out;
  }
  wait_params(lnf_w_, params_.size());
  if (refresh_by_range) bf16_weights_.mark_fresh();  // every range converted
  a_->have_dlogits = false;
  if (!has_head_) {
    a_->have_dlogits = dloss != 0.0f;
    return 0.0f;
  }
  lm_head_forward(x, N);
  if (!targets) return 0.0f;
  return cross_entropy(targets_.data(), targets, N, dloss);
}

}  // namespace ms
