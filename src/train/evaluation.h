// evaluation: the validation loss of a model: the mean loss over the first `batches` micro-batches
// of a loader, read from its beginning every time (so evaluations at different steps compare).
// Forward only: gradients and the loader's training position elsewhere are untouched. With
// pipeline parallelism the micro-batches flow through the stages (Trainer::eval_loss); stages that
// use no tokens never read the loader.
#pragma once

namespace ms {

class DataLoader;
class Trainer;

// Mean loss of the trainer's model over `batches` micro-batches (B x T, the loader's shape) from
// val's start, the same on every rank; every rank of the job calls it. val may be nullptr on the
// ranks that use no tokens (middle pipeline stages).
float eval_loss(Trainer& trainer, DataLoader* val, int batches);

}  // namespace ms
