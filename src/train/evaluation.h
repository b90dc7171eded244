// evaluation: the validation loss of a model: the mean loss over the first `batches` micro-batches
// of a loader, read from its beginning every time (so evaluations at different steps compare).
// Forward only: gradients and the loader's training position elsewhere are untouched.
#pragma once
#include <vector>

namespace ms {

class DataLoader;
class GPT;

// Mean loss of model over `batches` micro-batches (B x T, the loader's shape) from val's start.
// inputs/targets: scratch of at least B*T ids each.
float eval_loss(GPT& model, DataLoader& val, int batches, std::vector<int>& inputs, std::vector<int>& targets);

}  // namespace ms
