// gpt_backward.cpp: GPT::backward, the mirror of gpt_forward.cpp: a forward reduce_rows becomes a
// gather_rows of the output gradient and a forward gather_rows a reduce_rows of the input
// gradient. Input-gradient GEMMs run on row chunks inside the regions (pipelined with their
// communication); weight-gradient GEMMs and bias sums run once over all rows, so the gradients do
// not depend on how many chunks the regions use.
#include "base/check.h"        // MS_CHECK
#include "kernels/backend.h"   // KernelBackend
#include "model/gpt.h"

namespace ms {

void GPT::lm_head_backward(int N) {
  const int n = local_rows(1, N), C = C_;
  const float* P = params_.data();
  float* G = grads_.data();
  // bf16: dlogits were written as bf16 by the cross-entropy. dlnf (partial over the vocabulary parts) = dlogits @ wte_local; dwte_local += dlogits^T @ lnf.
  regions_->reduce_rows(dln_, dln_local_, n, C, /*accumulate=*/false, [&](int lo, int hi) {
    linear_data_grad_rows(dln_, logits_, dlogits_bf16_, false, P + wte_, lo, hi, C, Vl_, false);
  }, [&] { linear_weight_grad(G + wte_, nullptr, logits_, dlogits_bf16_, lnf_, lnf_bf16_, N, C, Vl_); });
}

void GPT::block_backward(int l, const float* x, int B, int T) {
  const int N = B * T, n = local_rows(B, T), C = C_, Cl = Cl_, Fl = Fl_;
  const bool bf16 = precision_ == DType::kBF16;
  BlockParams p = block_params(params_.data(), l);
  BlockParams g = block_params(grads_.data(), l);
  BlockActs& a = blocks_[l];
  const BlockActsBf16& ab = blocks_bf16_[l];
  const int W = cfg_.layer_window(l0_ + l);
  const bool par = cfg_.parallel_block();
  // dres (n,C) is dLoss/d(block output) on this part's rows. MLP branch first: the output
  // gradient's rows arrive (gather, fused with fc_proj's input gradient and GeLU's backward).
  const float* dout = regions_->gather_rows(dres_, dres_full_, n, C, [&](int lo, int hi) {
    linear_data_grad_rows(dfch_, dres_full_, dout_bf16_, bf16, p.fc_proj_w, lo, hi, Fl, C, false);
    const size_t r = static_cast<size_t>(lo) * Fl;
    k_->bias_gelu_backward(dfch_ + r, nullptr, dfch_ + r, a.fch + r, hi - lo, Fl);
  });
  linear_weight_grad(g.fc_proj_w, g.fc_proj_b, dout, dout_bf16_, a.fch_gelu, ab.fch_gelu, N, Fl, C);
  k_->add_column_sums(g.fc_b, dfch_, N, Fl);
  const float* ln_mlp = par ? a.ln1 : a.ln2;
  const bf16_t* ln_mlp16 = par ? ab.ln1 : ab.ln2;
  if (par) {
    // Parallel block: the attention branch sees the same output gradient (already gathered).
    linear_data_grad_rows(datty_, dout, dout_bf16_, false, p.attn_proj_w, 0, N, Cl, C, false);
    linear_weight_grad(g.attn_proj_w, g.attn_proj_b, dout, dout_bf16_, a.atty, ab.atty, N, Cl, C);
    k_->attention_backward(bf16, dqkv_, datty_, a.qkv, a.atty, a.att_lse, B, T, Cl, NHl_, W);
    // The shared LayerNorm's output gradient sums both branches: fc's and qkv's input gradients,
    // row chunk by row chunk, each leaving as soon as it is complete (reduce fused with fc).
    regions_->reduce_rows(dln_, dln_local_, n, C, /*accumulate=*/false, [&](int lo, int hi) {
      linear_data_grad_rows(dln_, dfch_, dout_bf16_, bf16, p.fc_w, lo, hi, C, Fl, false);
      linear_data_grad_rows(dln_, dqkv_, dqkv_bf16_, bf16, p.qkv_w, lo, hi, C, 3 * Cl, true);
    }, [&] {
      linear_weight_grad(g.fc_w, nullptr, dfch_, dout_bf16_, ln_mlp, ln_mlp16, N, C, Fl);
      linear_weight_grad(g.qkv_w, g.qkv_b, dqkv_, dqkv_bf16_, a.ln1, ab.ln1, N, C, 3 * Cl);
    });
    k_->layernorm_backward(dres_, g.ln1_w, g.ln1_b, dln_local_, x, p.ln1_w, a.ln1_mean, a.ln1_rstd, n, C);
    return;
  }
  // Sequential block: MLP sub-block's input gradient leaves (reduce fused with fc), LN2, then
  // the attention sub-block the same way.
  regions_->reduce_rows(dln_, dln_local_, n, C, /*accumulate=*/false, [&](int lo, int hi) {
    linear_data_grad_rows(dln_, dfch_, dout_bf16_, bf16, p.fc_w, lo, hi, C, Fl, false);
  }, [&] { linear_weight_grad(g.fc_w, nullptr, dfch_, dout_bf16_, ln_mlp, ln_mlp16, N, C, Fl); });
  // dres += LN2 backward: dres becomes dLoss/d(res_att).
  k_->layernorm_backward(dres_, g.ln2_w, g.ln2_b, dln_local_, a.res_att, p.ln2_w, a.ln2_mean, a.ln2_rstd, n, C);
  const float* dres_att = regions_->gather_rows(dres_, dres_full_, n, C, [&](int lo, int hi) {
    linear_data_grad_rows(datty_, dres_full_, dout_bf16_, bf16, p.attn_proj_w, lo, hi, Cl, C, false);
  });
  linear_weight_grad(g.attn_proj_w, g.attn_proj_b, dres_att, dout_bf16_, a.atty, ab.atty, N, Cl, C);
  k_->attention_backward(bf16, dqkv_, datty_, a.qkv, a.atty, a.att_lse, B, T, Cl, NHl_, W);
  regions_->reduce_rows(dln_, dln_local_, n, C, /*accumulate=*/false, [&](int lo, int hi) {
    linear_data_grad_rows(dln_, dqkv_, dqkv_bf16_, bf16, p.qkv_w, lo, hi, C, 3 * Cl, false);
  }, [&] { linear_weight_grad(g.qkv_w, g.qkv_b, dqkv_, dqkv_bf16_, a.ln1, ab.ln1, N, C, 3 * Cl); });
  k_->layernorm_backward(dres_, g.ln1_w, g.ln1_b, dln_local_, x, p.ln1_w, a.ln1_mean, a.ln1_rstd, n, C);
}

// dwpe[position] += dres on this part's rows; dwte[id - v0] += the gathered rows whose id this
// part holds, each element summed in row order (the backend's embedding_backward): deterministic,
// and independent of the regions' chunking (the sums run after the gather). defer_token_rows: no
// id is added (an empty id range); the gathered rows are left in token_grad_rows_.
void GPT::embedding_backward(int B, int T, bool defer_token_rows) {
  const int N = B * T, n = local_rows(B, T), C = C_;
  float* dwte = grads_.data() + wte_;
  float* dwpe = grads_.data() + wpe_;
  const int row0 = rows_exchanged_ ? shard_.index * n : 0;
  const float* d = regions_->gather_rows(dres_, dres_full_, n, C, [](int, int) {});
  k_->embedding_backward(dwte, dwpe, d, dres_, inputs_, N, n, C, T, row0, v0_, defer_token_rows ? v0_ : v0_ + Vl_);
  token_grad_rows_ = defer_token_rows ? d : nullptr;
}

void GPT::defer_token_grad() {
  MS_CHECK(has_emb_ && has_head_, "GPT::defer_token_grad: the chunk holds {}", has_emb_ ? "no LM head" : "no embedding");
  defer_token_grad_ = true;
}

void GPT::backward(const float* dout) {
  MS_CHECK(have_dlogits_, "GPT::backward: the last forward computed no gradient (dloss == 0 or no targets)");
  MS_CHECK(has_head_ == (dout == nullptr), "GPT::backward: a chunk {} the head takes {} output gradient",
           has_head_ ? "with" : "without", has_head_ ? "no" : "the");
  have_dlogits_ = false;
  const int B = B_, T = T_, N = B * T, n = local_rows(B, T), C = C_;
  const float* P = params_.data();
  float* G = grads_.data();
  const bool split = defer_token_grad_;  // the tied embedding in two (defer_token_grad)
  defer_token_grad_ = false;
  const size_t wte_end = token_embedding_range().second;

  if (has_head_) {
    // LM head (tied to wte) and final LayerNorm.
    const float* x_last = blocks_[L_ - 1].out;
    lm_head_backward(N);
    if (split && grad_ready_) grad_ready_(wte_, wte_end);  // the head's part of the tied embedding
    k_->fill(dres_, 0.0f, static_cast<size_t>(n) * C);
    k_->layernorm_backward(dres_, G + lnf_w_, G + lnf_b_, dln_local_, x_last, P + lnf_w_, lnf_mean_, lnf_rstd_, n, C);
    if (grad_ready_) grad_ready_(lnf_w_, params_.size());
  } else {
    k_->copy(dres_, dout, static_cast<size_t>(n) * C);
  }

  for (int l = L_ - 1; l >= 0; l--) {
    block_backward(l, l == 0 ? encoded_ : blocks_[l - 1].out, B, T);
    if (grad_ready_) grad_ready_(block_offset_[l], block_end(l));
  }
  // dres_ now holds the gradient of the chunk's input (input_grad()).
  if (has_emb_) embedding_backward(B, T, split);
  const size_t emb_lo = split ? wte_end : 0;  // split: wte was reported after the head
  // The embeddings (or the head's copy of wte).
  if (grad_ready_ && block_offset_[0] > emb_lo) grad_ready_(emb_lo, block_offset_[0]);
}

}  // namespace ms
