// gpt_backward.cpp: GPT::backward, the mirror of gpt_forward.cpp: a forward reduce_rows becomes a
// gather_rows of the output gradient and a forward gather_rows a reduce_rows of the input
// gradient. Input-gradient GEMMs run on row chunks inside the regions (pipelined with their
// communication); weight-gradient GEMMs and bias sums run once over all rows, so the gradients do
// not depend on how many chunks the regions use. Recomputation (model.recompute) re-runs forward
// work here first: a block's attention core (selective) or a whole group of blocks (full).
#include "base/check.h"        // MS_CHECK
#include "kernels/backend.h"   // KernelBackend
#include "model/gpt.h"

namespace ms {

void GPT::lm_head_backward(int N) {
  const int n = local_rows(1, N), C = C_;
  const float* P = params_.data();
  float* G = grads_.data();
  const ActSlot& s = *a_;
  // bf16: dlogits were written as bf16 by the cross-entropy. dlnf (partial over the vocabulary
  // parts) = dlogits @ head_local; dhead_local += dlogits^T @ lnf.
  regions_->reduce_rows(sc_.dln, sc_.dln_local, n, C, /*accumulate=*/false, [&](int lo, int hi) {
    linear_data_grad_rows(sc_.dln, s.logits, s.dlogits_bf16, false, P + head_, lo, hi, C, Vl_, false);
  }, [&] { linear_weight_grad(G + head_, nullptr, s.logits, s.dlogits_bf16, s.lnf, s.lnf_bf16, N, C, Vl_); });
}

void GPT::recompute_group(int last, int B, int T) {
  const int first = last / group_ * group_;
  for (int l = first; l <= last; l++) block_forward(l, block_input(l), B, T);
}

void GPT::block_backward(int l, const float* x, int B, int T) {
  const int N = B * T, n = local_rows(B, T), C = C_, Cl = Cl_, Fl = Fl_, FCl = FCl_, QKVl = QKVl_;
  const bool bf16 = precision_ == DType::kBF16, swiglu = cfg_.swiglu();
  BlockParams p = block_params(params_.data(), l);
  BlockParams g = block_params(grads_.data(), l);
  BlockActs& a = a_->blocks[l];
  const BlockActsBf16& ab = a_->blocks_bf16[l];
  const int W = cfg_.layer_window(l0_ + l);
  const bool par = cfg_.parallel_block();
  float *dres = sc_.dres, *dres_full = sc_.dres_full, *dln = sc_.dln, *dln_local = sc_.dln_local;
  float *dqkv = sc_.dqkv, *datty = sc_.datty, *dfch = sc_.dfch;
  if (cfg_.selective_recompute()) {  // the attention core and its bf16 copy, as forward made them
    attention_core(l, B, T);
    if (bf16) k_->f32_to_bf16(ab.atty, a.atty, static_cast<size_t>(N) * Cl);
  }
  // dres (n,C) is dLoss/d(block output) on this part's rows. MLP branch first: the output
  // gradient's rows arrive (gather, fused with fc_proj's input gradient and the activation's backward).
  const float* dout = regions_->gather_rows(dres, dres_full, n, C, [&](int lo, int hi) {
    const size_t r = static_cast<size_t>(lo) * Fl, rc = static_cast<size_t>(lo) * FCl;
    if (swiglu) {
      linear_data_grad_rows(sc_.dh, dres_full, sc_.dout16, bf16, p.fc_proj_w, lo, hi, Fl, C, false);
      k_->swiglu_backward(dfch + rc, sc_.dh + r, a.fch + rc, hi - lo, Fl);
    } else {
      linear_data_grad_rows(dfch, dres_full, sc_.dout16, bf16, p.fc_proj_w, lo, hi, Fl, C, false);
      k_->bias_gelu_backward(dfch + r, nullptr, dfch + r, a.fch + r, hi - lo, Fl);
    }
  });
  linear_weight_grad(g.fc_proj_w, g.fc_proj_b, dout, sc_.dout16, a.fch_gelu, ab.fch_gelu, N, Fl, C);
  if (g.fc_b) k_->add_column_sums(g.fc_b, dfch, N, FCl);
  const float* ln_mlp = par ? a.ln1 : a.ln2;
  const bf16_t* ln_mlp16 = par ? ab.ln1 : ab.ln2;
  // Attention's backward leaves dqkv with respect to the rotated queries and keys; RoPE's
  // transpose turns it into the gradient of the QKV GEMM's output.
  auto attention_back = [&] {
    k_->attention_backward(bf16, dqkv, datty, a.qkv, a.atty, a.att_lse, B, T, Cl, NHl_, NKVl_, W);
    rope_rows(dqkv, 0, N, T, /*backward=*/true);
  };
  if (par) {
    // Parallel block: the attention branch sees the same output gradient (already gathered).
    linear_data_grad_rows(datty, dout, sc_.dout16, false, p.attn_proj_w, 0, N, Cl, C, false);
    linear_weight_grad(g.attn_proj_w, g.attn_proj_b, dout, sc_.dout16, a.atty, ab.atty, N, Cl, C);
    attention_back();
    // The shared norm's output gradient sums both branches: fc's and qkv's input gradients,
    // row chunk by row chunk, each leaving as soon as it is complete (reduce fused with fc).
    regions_->reduce_rows(dln, dln_local, n, C, /*accumulate=*/false, [&](int lo, int hi) {
      linear_data_grad_rows(dln, dfch, sc_.dout16, bf16, p.fc_w, lo, hi, C, FCl, false);
      linear_data_grad_rows(dln, dqkv, sc_.dqkv16, bf16, p.qkv_w, lo, hi, C, QKVl, true);
    }, [&] {
      linear_weight_grad(g.fc_w, nullptr, dfch, sc_.dout16, ln_mlp, ln_mlp16, N, C, FCl);
      linear_weight_grad(g.qkv_w, g.qkv_b, dqkv, sc_.dqkv16, a.ln1, ab.ln1, N, C, QKVl);
    });
    norm_backward(dres, g.ln1_w, g.ln1_b, dln_local, x, p.ln1_w, a.ln1_mean, a.ln1_rstd, n);
    return;
  }
  // Sequential block: MLP sub-block's input gradient leaves (reduce fused with fc), LN2, then
  // the attention sub-block the same way.
  regions_->reduce_rows(dln, dln_local, n, C, /*accumulate=*/false, [&](int lo, int hi) {
    linear_data_grad_rows(dln, dfch, sc_.dout16, bf16, p.fc_w, lo, hi, C, FCl, false);
  }, [&] { linear_weight_grad(g.fc_w, nullptr, dfch, sc_.dout16, ln_mlp, ln_mlp16, N, C, FCl); });
  // dres += LN2 backward: dres becomes dLoss/d(res_att).
  norm_backward(dres, g.ln2_w, g.ln2_b, dln_local, a.res_att, p.ln2_w, a.ln2_mean, a.ln2_rstd, n);
  const float* dres_att = regions_->gather_rows(dres, dres_full, n, C, [&](int lo, int hi) {
    linear_data_grad_rows(datty, dres_full, sc_.dout16, bf16, p.attn_proj_w, lo, hi, Cl, C, false);
  });
  linear_weight_grad(g.attn_proj_w, g.attn_proj_b, dres_att, sc_.dout16, a.atty, ab.atty, N, Cl, C);
  attention_back();
  regions_->reduce_rows(dln, dln_local, n, C, /*accumulate=*/false, [&](int lo, int hi) {
    linear_data_grad_rows(dln, dqkv, sc_.dqkv16, bf16, p.qkv_w, lo, hi, C, QKVl, false);
  }, [&] { linear_weight_grad(g.qkv_w, g.qkv_b, dqkv, sc_.dqkv16, a.ln1, ab.ln1, N, C, QKVl); });
  norm_backward(dres, g.ln1_w, g.ln1_b, dln_local, x, p.ln1_w, a.ln1_mean, a.ln1_rstd, n);
}

// dwpe[position] += dres on this part's rows (learned positions); dwte[id - v0] += the gathered rows
// whose id this part holds, each element summed in row order (the backend's embedding_backward):
// deterministic, and independent of the regions' chunking (the sums run after the gather).
// defer_token_rows: no id is added (an empty id range); the gathered rows are left in token_grad_rows_.
void GPT::embedding_backward(int B, int T, bool defer_token_rows) {
  const int N = B * T, n = local_rows(B, T), C = C_;
  float* dwte = grads_.data() + wte_;
  float* dwpe = has_wpe_ ? grads_.data() + wpe_ : nullptr;
  const int row0 = rows_exchanged_ ? shard_.index * n : 0;
  const float* d = regions_->gather_rows(sc_.dres, sc_.dres_full, n, C, [](int, int) {});
  k_->embedding_backward(dwte, dwpe, d, sc_.dres, a_->inputs, N, n, C, T, row0, v0_,
                         defer_token_rows ? v0_ : v0_ + Vl_);
  token_grad_rows_ = defer_token_rows ? d : nullptr;
}

void GPT::defer_token_grad() {
  MS_CHECK(has_emb_ && has_head_ && tied_embedding(), "GPT::defer_token_grad: the chunk holds {}",
           !has_emb_ ? "no embedding" : !has_head_ ? "no LM head" : "an untied LM head");
  defer_token_grad_ = true;
}

void GPT::backward(const float* dout) {
  MS_CHECK(a_->have_dlogits, "GPT::backward: the last forward computed no gradient (dloss == 0 or no targets)");
  MS_CHECK(has_head_ == (dout == nullptr), "GPT::backward: a chunk {} the head takes {} output gradient",
           has_head_ ? "with" : "without", has_head_ ? "no" : "the");
  a_->have_dlogits = false;
  const int B = a_->B, T = a_->T, N = B * T, n = local_rows(B, T), C = C_;
  const float* P = params_.data();
  float* G = grads_.data();
  const bool split = defer_token_grad_;  // the tied embedding in two (defer_token_grad)
  defer_token_grad_ = false;
  const size_t wte_end = token_embedding_range().second;

  if (has_head_) {
    // LM head (tied to wte, or its own weight) and final norm.
    const float* x_last = a_->blocks[L_ - 1].out;
    lm_head_backward(N);
    if (split && grad_ready_) grad_ready_(wte_, wte_end);  // the head's part of the tied embedding
    k_->fill(sc_.dres, 0.0f, static_cast<size_t>(n) * C);
    norm_backward(sc_.dres, G + lnf_w_, has_lnf_b_ ? G + lnf_b_ : nullptr, sc_.dln_local, x_last, P + lnf_w_,
                  a_->lnf_mean, a_->lnf_rstd, n);
    if (grad_ready_) grad_ready_(lnf_w_, params_.size());
  } else {
    k_->copy(sc_.dres, dout, static_cast<size_t>(n) * C);
  }

  for (int l = L_ - 1; l >= 0; l--) {
    if (group_last(l)) recompute_group(l, B, T);
    block_backward(l, block_input(l), B, T);
    if (grad_ready_) grad_ready_(block_offset_[l], block_end(l));
  }
  // dres now holds the gradient of the chunk's input (input_grad()).
  if (has_emb_) embedding_backward(B, T, split);
  const size_t emb_lo = split ? wte_end : 0;  // split: wte was reported after the head
  // The embeddings (or the head's copy of wte).
  if (grad_ready_ && block_offset_[0] > emb_lo) grad_ready_(emb_lo, block_offset_[0]);
}

}  // namespace ms
