// sampling: text from a trained model. Autoregressive top-k sampling (k = 40) from the tokenizer's
// document separator as the prompt (GPT-2: <|endoftext|>; Llama 3: <|begin_of_text|>), over a
// context window of the model's last T tokens; the draw is seeded (base/rng.h), so the same weights
// and seed give the same text (for any tensor-parallel split). Stops at the separator or after ntokens.
#pragma once
#include <cstdint>
#include <string>

namespace ms {

class Communicator;
class GPT;
class Tokenizer;

// Up to ntokens tokens generated with context windows of at most T tokens, decoded to text.
// A tensor-parallel part (model.shard().parts > 1) samples together with the other parts of its
// group `tp`: every member calls this with the same arguments; each forward is collective, the
// last row's logits (this part's vocabulary columns) are all-gathered, and every member draws the
// same token, so the full B x T x V logits never exist.
std::string sample_text(GPT& model, const Tokenizer& tok, int T, int ntokens, uint64_t seed,
                        Communicator* tp = nullptr);

}  // namespace ms
