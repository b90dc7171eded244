// local_param_state.cpp: see local_param_state.h.
#include "parallel/local_param_state.h"

#include <algorithm>  // std::copy_n
#include <vector>

#include "base/check.h"            // MS_FAIL
#include "obs/trace_sink.h"        // TraceScope
#include "optim/decay_policy.h"    // optimizer_tensors
#include "optim/grad_norm.h"       // grad_sq_sum

namespace ms {

LocalParamState::LocalParamState(GPT& model, const OptimConfig& optim)
    : model_(model),
      optimizer_(optim, optimizer_tensors(model.param_specs(), optim), model.num_params(), model.device()) {}

void LocalParamState::begin_step() {
  if (!grads_zeroed_) model_.zero_grad();  // the optimizer clears them in its pass
  grads_zeroed_ = false;
}

void LocalParamState::finish_grad_reduce() {
  if (combine_) combine_(model_.grads());
}

void LocalParamState::set_grad_combine(size_t, std::function<void(float* grads)> combine) {
  // The whole buffer is combined after the last backward: no bucket waits on [0, hi).
  combine_ = std::move(combine);
}

void LocalParamState::set_tensor_norm_reduce(TensorNormReduce fn) {
  // The optimizer's tensors are whole local tensors: only the TP sum of sharded tensors is missing.
  optimizer_.set_norm_reduce(std::move(fn));
}

std::vector<ParamTensor> LocalParamState::owned_views(const std::vector<char>& which) const {
  std::vector<ParamTensor> out;
  const auto& specs = model_.param_specs();
  for (size_t i = 0; i < specs.size(); i++)
    if (which[i]) out.push_back(ParamTensor{specs[i].name, specs[i].offset, specs[i].numel(), false});
  return out;
}

double LocalParamState::grad_sq_sum(const std::vector<char>* counted) {
  const GPT& m = model_;
  if (!counted) return ms::grad_sq_sum(m.grads(), m.num_params(), m.device());
  double s = 0;
  const auto& specs = m.param_specs();
  for (size_t i = 0; i < specs.size(); i++)
    if ((*counted)[i]) s += ms::grad_sq_sum(m.grads() + specs[i].offset, specs[i].numel(), m.device());
  return s;
}

void LocalParamState::update(float lr, float grad_scale) {
  TraceScope span("optimizer");
  // Non-const params() marks the bf16 weight copy stale: the next forward converts it once,
  // unless the optimizer wrote it in its own pass (AdamW fuses the clipping scale and the copy).
  float* params = model_.params();
  if (optimizer_.step(params, model_.grads(), lr, grad_scale, model_.bf16_weight_copy(), /*zero_grads=*/true))
    model_.mark_bf16_weights_fresh();
  grads_zeroed_ = true;
}

void LocalParamState::reset_from_model() {
  optimizer_.zero_moments();
  optimizer_.set_steps_taken(0);
  grads_zeroed_ = false;
}

void LocalParamState::load_state(const float* params, const float* m, const float* v, int steps_taken) {
  optimizer_.load_moments(m, v);
  optimizer_.set_steps_taken(steps_taken);
  model_.load_params(params);  // the bf16 copy goes stale
  grads_zeroed_ = false;
}

size_t LocalParamState::load_replica_weights(int replica, const float*, size_t) {
  MS_FAIL("restore: replica {}'s weights given to a rank without data-parallel replicas", replica);
  return 0;
}

size_t LocalParamState::load_own_runs(const float* packed, int steps_taken, bool /*gather: one replica*/) {
  const size_t n = model_.num_params();
  std::vector<float> P(n), M(n), V(n);
  size_t read = 0;
  for (const ParamSpec& s : model_.param_specs()) {  // append_state_runs' order: whole tensors
    const size_t k = s.numel();
    std::copy_n(packed + read, k, P.data() + s.offset);
    std::copy_n(packed + read + k, k, M.data() + s.offset);
    std::copy_n(packed + read + 2 * k, k, V.data() + s.offset);
    read += 3 * k;
  }
  load_state(P.data(), M.data(), V.data(), steps_taken);
  return read;
}

void LocalParamState::append_state_runs(int chunk, const std::vector<char>& owned, int head_copy_tensor,
                                        std::vector<StateRun>& out) {
  const auto& specs = model_.param_specs();
  const float* P = static_cast<const GPT&>(model_).params();
  const float* M = optimizer_.moment1();
  const float* V = optimizer_.moment2();
  for (size_t i = 0; i < specs.size(); i++) {
    if (!owned[i]) continue;
    const size_t at = specs[i].offset;
    out.push_back({chunk, &specs[i], static_cast<int>(i) == head_copy_tensor, 0, specs[i].numel(), P + at, M + at,
                   V + at, model_.device()});
  }
}

}  // namespace ms
