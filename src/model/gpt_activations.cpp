// gpt_activations.cpp: see gpt_activations.h.
#include "model/gpt_activations.h"

#include <algorithm>  // std::max, std::min

namespace ms {

LocalDims local_dims(const ActDims& d) {
  const ModelConfig& c = d.cfg;
  const int P = d.shard.parts;
  LocalDims l{};
  l.NHl = c.n_head / P;
  l.NKVl = c.kv_heads() / P;
  l.HS = c.head_size();
  l.Cl = l.NHl * l.HS;
  l.QKVl = (l.NHl + 2 * l.NKVl) * l.HS;
  l.Fl = c.ffn() / P;
  l.FCl = c.fc_width() / P;
  l.Vl = c.padded_vocab() / P;
  l.L = d.shard.end_layer(c.n_layer) - d.shard.layer_begin;
  l.N = static_cast<size_t>(d.maxB) * d.maxT;
  l.rows_exchanged = P > 1 && d.shard.seq_sharded;
  l.n = l.rows_exchanged ? l.N / P : l.N;
  l.par = c.parallel_block();
  l.bf16 = d.precision == DType::kBF16;
  l.split = P > 1;
  l.head = d.shard.has_head(c.n_layer);
  l.emb = d.shard.has_embedding();
  l.group = c.full_recompute() ? std::min(c.recompute_every, l.L) : 0;
  return l;
}

void plan_activations(const ActDims& d, std::vector<ActSlot>& slots, ActScratch& sc, const TakeF32& take,
                      const TakeBf16& take16) {
  const LocalDims l = local_dims(d);
  const size_t N = l.N, n = l.n, C = static_cast<size_t>(d.cfg.n_embd);
  const size_t Cl = l.Cl, QKVl = l.QKVl, Fl = l.Fl, FCl = l.FCl, Vl = l.Vl, NHl = l.NHl;
  const bool ln = !d.cfg.rmsnorm(), bf16 = l.bf16, par = l.par, swiglu = d.cfg.swiglu();
  const bool selective = d.cfg.selective_recompute(), full = l.group > 0;
  const int L = l.L, G = l.group;
  // One block's fp32 activations; core: its own atty/lse; out: its own output buffer.
  auto block = [&](BlockActs& a, bool core, bool out) {
    if (!bf16) take(&a.ln1, N * C);
    if (ln) take(&a.ln1_mean, n);
    take(&a.ln1_rstd, n);
    take(&a.qkv, N * QKVl);
    if (core) { take(&a.atty, N * Cl); take(&a.att_lse, N * NHl); }
    if (!par) {
      take(&a.res_att, n * C);
      if (!bf16) take(&a.ln2, N * C);
      if (ln) take(&a.ln2_mean, n);
      take(&a.ln2_rstd, n);
    }
    take(&a.fch, N * FCl);
    if (!bf16) take(&a.fch_gelu, N * Fl);
    if (out) take(&a.out, n * C);
  };
  auto block16 = [&](BlockActsBf16& b, bool core) {
    take16(&b.ln1, N * C);
    if (core) take16(&b.atty, N * Cl);
    if (!par) take16(&b.ln2, N * C);
    take16(&b.fch_gelu, N * Fl);
  };
  slots.assign(d.slots, ActSlot{});
  std::vector<std::vector<float*>> kept(slots.size());  // full recompute: each group's output, per slot
  const int groups = full ? (L + G - 1) / G : 0;
  for (size_t s = 0; s < slots.size(); s++) {
    ActSlot& sl = slots[s];
    take(&sl.encoded, n * C);
    sl.blocks.assign(L, BlockActs{});
    sl.blocks_bf16.assign(L, BlockActsBf16{});
    if (full) {
      kept[s].assign(groups, nullptr);
      for (float*& k : kept[s]) take(&k, n * C);
    } else {
      for (BlockActs& a : sl.blocks) block(a, !selective, true);
    }
    if (l.head) {
      take(&sl.lnf, N * C);
      if (ln) take(&sl.lnf_mean, n);
      take(&sl.lnf_rstd, n);
      take(&sl.logits, N * Vl);
      take(&sl.losses, N);
    }
  }
  // Shared: the full-recompute workspace (one group; its last block writes the kept output),
  // the selective-recompute attention core, the bf16-mode fp32 GEMM inputs, the scratch.
  std::vector<BlockActs> ws(G);
  for (int j = 0; j < G; j++) block(ws[j], true, j + 1 < G);
  BlockActs core{};
  if (selective) { take(&core.atty, N * Cl); take(&core.att_lse, N * NHl); }
  if (l.rows_exchanged) take(&sc.ln_local, n * C);
  float *shared_ln1 = nullptr, *shared_ln2 = nullptr;
  if (bf16) {
    take(&shared_ln1, N * C);
    if (!par) take(&shared_ln2, N * C);
  }
  if (l.split && l.head) { take(&sc.ce_max, N); take(&sc.ce_sums, 2 * N); }
  if (l.split) { take(&sc.partial, N * C); take(&sc.dln_local, n * C); }
  take(&sc.dres, n * C);
  if (l.rows_exchanged) take(&sc.dres_full, N * C);
  take(&sc.dln, N * C);
  take(&sc.dqkv, N * QKVl);
  take(&sc.datty, N * Cl);
  take(&sc.dfch, N * FCl);
  if (swiglu) take(&sc.dh, N * Fl);

  // bf16 copies: per slot what a backward reads, then the shared ones.
  std::vector<BlockActsBf16> ws16(G);
  BlockActsBf16 core16{};
  if (bf16) {
    for (ActSlot& sl : slots) {
      if (!full)
        for (BlockActsBf16& b : sl.blocks_bf16) block16(b, !selective);
      if (l.head) { take16(&sl.lnf_bf16, N * C); take16(&sl.dlogits_bf16, N * Vl); }
    }
    for (BlockActsBf16& b : ws16) block16(b, true);
    if (selective) take16(&core16.atty, N * Cl);
    take16(&sc.dout16, N * std::max(C, FCl));
    take16(&sc.dqkv16, N * QKVl);
  }

  // Storage shared by several fields.
  for (size_t s = 0; s < slots.size(); s++) {
    ActSlot& sl = slots[s];
    for (int i = 0; i < L; i++) {
      BlockActs& a = sl.blocks[i];
      BlockActsBf16& b = sl.blocks_bf16[i];
      if (full) {
        const int g = i / G, j = i % G;
        a = ws[j];
        b = ws16[j];
        if (j + 1 == G || i + 1 == L) a.out = kept[s][g];  // a group's last block: the kept output
      }
      if (selective) { a.atty = core.atty; a.att_lse = core.att_lse; b.atty = core16.atty; }
      if (bf16) { a.ln1 = shared_ln1; a.ln2 = par ? nullptr : shared_ln2; }
      if (!bf16) b = BlockActsBf16{};
    }
  }
  if (!l.rows_exchanged) sc.dres_full = sc.dres;
  if (!l.split) sc.dln_local = sc.dln;
}

std::pair<size_t, size_t> count_activations(const ActDims& d) {
  std::vector<ActSlot> slots;
  ActScratch sc;
  size_t f32 = 0, b16 = 0;
  plan_activations(d, slots, sc, [&](float**, size_t c) { f32 += c; }, [&](bf16_t**, size_t c) { b16 += c; });
  return {f32, b16};
}

}  // namespace ms
