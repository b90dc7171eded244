// gpt_activations: where the GPT's activations and backward scratch live, and how many elements
// they take: one rule (plan_activations) that both carves the model's buffers (GPT's constructor)
// and counts them without building anything (GPT::planned_footprint, the planner's memory), so the
// two cannot disagree. Dimension letters as gpt.h.
// What a backward reads is kept per activation slot (a micro-batch in flight); forward and backward
// scratch is shared. Activation recomputation (model.recompute) changes what is kept:
//  - none: every block's activations per slot;
//  - selective: as none, but the attention core's output and log-sum-exp (atty, lse, and atty's bf16
//    copy) live in one shared buffer: backward re-runs the attention forward from the kept qkv;
//  - full: per slot only the input of each group of recompute_every layers (and the chunk's
//    output); the blocks' activations live in a shared workspace of one group, written by forward
//    and re-written by backward's re-run of the group's forward.
// In bf16 mode the fp32 ln1 and ln2 (all rows) are only GEMM inputs (the backward reads their bf16
// copies), so one shared fp32 scratch of each serves every layer and slot; the MLP's activation
// writes its bf16 output directly and has no fp32 buffer (fch_gelu is nullptr).
#pragma once
#include <cstddef>
#include <functional>
#include <vector>

#include "base/bf16.h"            // bf16_t
#include "base/dtype.h"           // DType
#include "config/model_config.h"  // ModelConfig
#include "model/param_layout.h"   // ModelShard

namespace ms {

// Pointers of one block's saved activations (local shapes; QKVl = (NHl + 2 NKVl) HS, FCl = Fl or 2Fl).
struct BlockActs {
  float *ln1, *ln1_mean, *ln1_rstd;  // (N,C) all rows (the GEMMs' input), (n) (layernorm only), (n)
  float *qkv;                        // (N,QKVl), queries and keys rotated when positions = rope
  float *atty, *att_lse;             // (N,Cl), (B,NHl,T)
  float *res_att;                    // (n,C) x + attention branch; sequential block only
  float *ln2, *ln2_mean, *ln2_rstd;  // sequential block only
  float *fch, *fch_gelu;             // (N,FCl) the MLP's first GEMM (bias added), (N,Fl) its activation
  float *out;                        // (n,C) block output = next block's input
};
// bf16 copies of the GEMM inputs of one block (bf16 mode only); ln2 nullptr in the parallel block.
struct BlockActsBf16 { bf16_t *ln1, *atty, *ln2, *fch_gelu; };

// One saved-activation set (a micro-batch in flight).
struct ActSlot {
  float* encoded = nullptr;                 // (n,C) block 0's input
  std::vector<BlockActs> blocks;            // every held block (full recompute: the workspace's,
                                            // each group's last block writing its kept output)
  std::vector<BlockActsBf16> blocks_bf16;
  float *lnf = nullptr, *lnf_mean = nullptr, *lnf_rstd = nullptr, *logits = nullptr, *losses = nullptr;
  bf16_t *lnf_bf16 = nullptr, *dlogits_bf16 = nullptr;
  int* inputs = nullptr;
  int B = 0, T = 0;
  bool have_dlogits = false;
};

// Shared forward and backward scratch. dres (n,C) is the gradient of the residual stream, dres_full
// (N,C) its gathered rows (== dres unless rows are exchanged), dln (N,C) a norm output's gradient
// (this part's partial sum), dln_local (n,C) its reduced rows (== dln when P = 1); dh (N,Fl) the
// gradient of the MLP activation (SwiGLU only; GeLU works in place in dfch).
struct ActScratch {
  float *ln_local = nullptr;                          // (n,C) a norm's own rows before gather_rows (rows exchanged)
  float *ce_max = nullptr, *ce_sums = nullptr;        // (N), (N,2) vocabulary-parallel softmax statistics
  float *partial = nullptr;                           // (N,C) a row-parallel layer's partial sums (P > 1)
  float *dres = nullptr, *dres_full = nullptr, *dln = nullptr, *dln_local = nullptr;
  float *dqkv = nullptr, *datty = nullptr, *dfch = nullptr, *dh = nullptr;
  // bf16: converted output gradients: dout16 (N, max(C, FCl)) and dqkv16 (N, QKVl), which the parallel
  // block's backward needs at the same time as dout16.
  bf16_t *dout16 = nullptr, *dqkv16 = nullptr;
};

// The arguments a GPT's buffers depend on.
struct ActDims {
  ModelConfig cfg;
  int maxB = 0, maxT = 0;
  DType precision = DType::kF32;
  ModelShard shard;
  int slots = 1;
};

// Calls take(ptr, count) / take16(ptr16, count) for every fp32 / bf16 buffer of the layout in carving
// order, after sizing slots (one per activation slot, blocks for the held layers) and pointing their
// fields (and the scratch's) at the addresses take/take16 set; fields that share storage are
// assigned after. take may leave *ptr unset (counting only): aliases are then meaningless, counts exact.
using TakeF32 = std::function<void(float**, size_t)>;
using TakeBf16 = std::function<void(bf16_t**, size_t)>;
void plan_activations(const ActDims& d, std::vector<ActSlot>& slots, ActScratch& sc, const TakeF32& take,
                      const TakeBf16& take16);

// (fp32 elements, bf16 elements) of plan_activations' layout.
std::pair<size_t, size_t> count_activations(const ActDims& d);

// Local shapes of a model held by `shard` (see gpt.h).
struct LocalDims {
  int NHl, NKVl, HS, Cl, QKVl, Fl, FCl, Vl, L;
  size_t N, n;
  bool rows_exchanged, par, bf16, split, head, emb;
  int group;  // layers per recompute group (full recompute; 0 otherwise)
};
LocalDims local_dims(const ActDims& d);

}  // namespace ms
