// optim_kernels: the optimizer's arithmetic on device memory: the device counterpart of
// optim/adamw.h, optim/lamb.h and optim/grad_norm.h (the CPU optimizer stays optim/'s own code,
// bit-exact with torch; these follow it operation by operation, in fp32 with the same fma
// placement and double sums, so a GPU step agrees with the CPU's within rounding of the reductions).
// One tensor per call (offsets already applied by the caller), enqueued on the backend's stream.
// Guarantees: every reduction has a fixed order (no atomics): the same inputs give the same bits on
// every run; sum_squares returns a host value (it waits for the stream); a build without
// MEGASCALE_WITH_CUDA links, and cuda_optim_kernels() then throws an ms::Error naming the option.
#pragma once
#include <cstddef>  // size_t

#include "base/bf16.h"  // bf16_t

namespace ms {

class OptimKernels {
 public:
  virtual ~OptimKernels() = default;
  // optim/adamw.h on one tensor of n elements (decay: weight decay applies): the scalars formed on
  // the host in double as the CPU does; grads read scaled by grad_scale; bf16_out (may be nullptr)
  // receives the updated parameters in bf16; zero_grads clears grads after reading.
  virtual void adamw_update(float* params, float* grads, float* m, float* v, size_t n, bool decay, float lr, int t,
                            float beta1, float beta2, float eps, float weight_decay, float grad_scale,
                            bf16_t* bf16_out, bool zero_grads) = 0;
  // optim/lamb.h phase 1 on one tensor: m, v updated, r written to update; returns on the host the
  // sums of squares of the weights (before the update) in *w_sq and of r in *r_sq (double).
  virtual void lamb_compute_update(const float* params, const float* grads, float* m, float* v, float* update,
                                   size_t n, bool decay, int t, float beta1, float beta2, float eps,
                                   float weight_decay, bool bias_correction, double* w_sq, double* r_sq) = 0;
  // Phase 2: params -= step * update (step = lr * trust, formed on the host).
  virtual void lamb_apply_update(float* params, const float* update, size_t n, float step) = 0;
  // Sum of squares of x[0..n) in double (host result).
  virtual double sum_squares(const float* x, size_t n) = 0;
  // x[i] *= s; x[i] = value.
  virtual void scale(float* x, size_t n, float s) = 0;
  virtual void fill(float* x, size_t n, float value) = 0;
};

// The CUDA optimizer kernels on the default stream (named ms::Error without CUDA or a device).
OptimKernels& cuda_optim_kernels();

}  // namespace ms
