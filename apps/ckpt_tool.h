// ckpt_tool: `megascale ckpt inspect DIR` and `megascale ckpt export DIR OUT`, over the ckpt layer.
// DIR is a step folder (holding manifest.json) or a checkpoint root (its `latest` is used).
#pragma once
#include <string>

namespace ms {

// Prints the manifest (step, data position, layout, model, tensors, files) and verifies every
// file's size and XXH64 and structure. Returns 0 when all verify, 1 otherwise (each failure named).
int run_ckpt_inspect(const std::string& dir);
// Writes the whole model (any saving layout) as the Hugging Face GPT-2 folder `train` exports.
void run_ckpt_export(const std::string& dir, const std::string& out);

}  // namespace ms
