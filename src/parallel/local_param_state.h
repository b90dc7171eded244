// local_param_state: the ParamState (param_state.h) of a chunk whose weights, gradients and
// optimizer moments live whole on this rank (no data parallelism). The chunk's model holds the
// master weights and the gradients; the optimizer (AdamW fuses clipping, the update, the bf16
// weight copy and zeroing the gradients into one pass) holds the moments. With tensor parallelism
// the optimizer's LAMB norms are reduced by the hook the caller installs.
// On a GPU (train.device = cuda) the model's buffers and the moments are device memory: the norm and
// the update run there, and the state runs point into GPU memory (StateRun::device).
// Guarantees: the same arithmetic, in the same order, as a single-process step of the model.
#pragma once
#include <functional>
#include <memory>
#include <vector>

#include "config/optim_config.h"  // OptimConfig
#include "model/gpt.h"            // GPT
#include "optim/optimizer.h"      // Optimizer
#include "parallel/param_state.h" // ParamState

namespace ms {

class LocalParamState final : public ParamState {
 public:
  LocalParamState(GPT& model, const OptimConfig& optim);

  void begin_step() override;
  void arm_grad_reduce(bool) override {}
  void finish_grad_reduce() override;
  void set_grad_combine(size_t hi, std::function<void(float* grads)> combine) override;
  void set_tensor_norm_reduce(TensorNormReduce fn) override;
  float* owned_grads() override { return model_.grads(); }
  size_t owned_size() const override { return model_.num_params(); }
  std::vector<ParamTensor> owned_views(const std::vector<char>& which) const override;
  double grad_sq_sum(const std::vector<char>* counted) override;
  double sum_over_replicas(double v) override { return v; }
  void update(float lr, float grad_scale) override;
  void finish_param_gather() override {}
  double exposed_seconds() const override { return 0; }

  int steps_taken() const override { return optimizer_.steps_taken(); }
  int replicas() const override { return 1; }
  void reset_from_model() override;
  void load_state(const float* params, const float* m, const float* v, int steps_taken) override;
  size_t load_own_runs(const float* packed, int steps_taken, bool gather) override;
  size_t load_replica_weights(int replica, const float* packed, size_t available) override;
  void append_state_runs(int chunk, const std::vector<char>& owned, int head_copy_tensor,
                         std::vector<StateRun>& out) override;
  std::string describe() const override { return ""; }

 private:
  GPT& model_;
  Optimizer optimizer_;
  bool grads_zeroed_ = false;  // the last update left the gradient buffer zero (fused in its pass)
  std::function<void(float*)> combine_;
};

}  // namespace ms
