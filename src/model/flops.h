// flops: model FLOPs of one training token, the numerator of MFU as MegaScale counts it: the
// matmuls of forward and backward (backward = 2x forward), with the real vocabulary V (not the
// padded one) and the attention over the keys each query actually attends, so a sliding window
// lowers it. Element-wise work (LayerNorm, GeLU, softmax) is not counted.
#pragma once
#include "config/model_config.h"  // ModelConfig

namespace ms {

double model_flops_per_token(const ModelConfig& cfg, int T);

}  // namespace ms
