// sampling.cpp: see sampling.h.
#include "train/sampling.h"

#include <algorithm>   // std::partial_sort, std::max
#include <cmath>       // std::exp
#include <functional>  // std::greater
#include <utility>     // std::pair
#include <vector>

#include "base/check.h"       // MS_CHECK
#include "base/rng.h"         // Rng
#include "comm/communicator.h"  // Communicator
#include "data/tokenizer.h"   // Tokenizer
#include "model/gpt.h"        // GPT

namespace ms {

std::string sample_text(GPT& model, const Tokenizer& tok, int T, int ntokens, uint64_t seed, Communicator* tp) {
  const int V = model.config().vocab_size, Vp = model.config().padded_vocab(), Vl = model.local_vocab();
  const bool split = model.shard().parts > 1;
  MS_CHECK(!split || (tp && tp->size() == model.shard().parts && tp->rank() == model.shard().index),
           "sample_text: a tensor-parallel part samples with its group");
  const int topk = 40;
  std::vector<float> row(split ? Vp : 0), last(Vl);
  std::vector<int> window;
  // A sequence-parallel part needs a length its group divides: windows are padded at the end
  // (causal attention: the padding does not change the logits of the rows before it).
  const int parts = model.shard().seq_sharded ? model.shard().parts : 1;
  Rng rng(seed, /*stream=*/0x5a4d);
  std::vector<int> ctx = {tok.document_separator()}, out;
  std::vector<std::pair<float, int>> cand(V);
  for (int i = 0; i < ntokens; i++) {
    int start = std::max(0, static_cast<int>(ctx.size()) - T);
    int len = static_cast<int>(ctx.size()) - start;
    const int run = (len + parts - 1) / parts * parts;
    window.assign(ctx.begin() + start, ctx.end());
    window.resize(run, tok.document_separator());
    model.forward(window.data(), nullptr, 1, run);
    model.copy_logits_to_host(len - 1, 1, last.data());  // host memory on any device
    const float* logits = last.data();
    if (split) {  // every part's columns, in vocabulary order
      tp->all_gather(logits, row.data(), static_cast<size_t>(Vl), DType::kF32);
      logits = row.data();
    }
    for (int v = 0; v < V; v++) cand[v] = {logits[v], v};
    std::partial_sort(cand.begin(), cand.begin() + topk, cand.end(), std::greater<>());
    double z = 0;
    for (int k = 0; k < topk; k++) z += std::exp(cand[k].first - cand[0].first);
    double u = rng.uniform() * z, acc = 0;
    int next = cand[topk - 1].second;
    for (int k = 0; k < topk; k++) {
      acc += std::exp(cand[k].first - cand[0].first);
      if (u < acc) { next = cand[k].second; break; }
    }
    if (next == tok.document_separator()) break;
    ctx.push_back(next);
    out.push_back(next);
  }
  return tok.decode(out);
}

}  // namespace ms
