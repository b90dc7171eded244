// sampling: text from a trained model. Autoregressive top-k sampling (k = 40) from an end-of-text
// prompt, over a context window of the model's last T tokens; the draw is seeded (base/rng.h), so the
// same weights and seed give the same text. Stops at end-of-text or after ntokens.
#pragma once
#include <cstdint>
#include <string>

namespace ms {

class GPT;
class Gpt2Tokenizer;

// Up to ntokens tokens generated with context windows of at most T tokens, decoded to text.
std::string sample_text(GPT& model, const Gpt2Tokenizer& tok, int T, int ntokens, uint64_t seed);

}  // namespace ms
