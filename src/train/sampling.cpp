// sampling.cpp: see sampling.h.
#include "train/sampling.h"

#include <algorithm>   // std::partial_sort, std::max
#include <cmath>       // std::exp
#include <functional>  // std::greater
#include <utility>     // std::pair
#include <vector>

#include "base/rng.h"         // Rng
#include "data/tokenizer.h"   // Gpt2Tokenizer
#include "model/gpt.h"        // GPT

namespace ms {

std::string sample_text(GPT& model, const Gpt2Tokenizer& tok, int T, int ntokens, uint64_t seed) {
  const int V = model.config().vocab_size, Vp = model.config().padded_vocab();
  const int topk = 40;
  Rng rng(seed, /*stream=*/0x5a4d);
  std::vector<int> ctx = {tok.eot()}, out;
  std::vector<std::pair<float, int>> cand(V);
  for (int i = 0; i < ntokens; i++) {
    int start = std::max(0, static_cast<int>(ctx.size()) - T);
    int len = static_cast<int>(ctx.size()) - start;
    model.forward(ctx.data() + start, nullptr, 1, len);
    const float* logits = model.logits() + static_cast<size_t>(len - 1) * Vp;
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
    if (next == tok.eot()) break;
    ctx.push_back(next);
    out.push_back(next);
  }
  return tok.decode(out);
}

}  // namespace ms
