// optim_kernels_cuda.cpp (CUDA builds only): the CUDA OptimKernels (optim_kernels.h) over the
// ms::cuda:: entries on the default stream. lamb_compute_update and sum_squares write their double
// sums to a two-double device array of the instance (allocated on the first call, then kept), copy
// them to the host and wait for the stream.
#include <cstddef>  // size_t

#include "base/device.h"  // DeviceBuffer, copy_bytes, stream_sync, require_device
#include "kernels/cuda_kernels.h"
#include "kernels/optim_kernels.h"

namespace ms {
namespace {

class CudaOptimKernels final : public OptimKernels {
 public:
  void adamw_update(float* params, float* grads, float* m, float* v, size_t n, bool decay, float lr, int t,
                    float beta1, float beta2, float eps, float weight_decay, float grad_scale, bf16_t* bf16_out,
                    bool zero_grads) override {
    cuda::adamw_update(params, grads, m, v, n, decay, lr, t, beta1, beta2, eps, weight_decay, grad_scale, bf16_out,
                       zero_grads, stream_);
  }
  void lamb_compute_update(const float* params, const float* grads, float* m, float* v, float* update, size_t n,
                           bool decay, int t, float beta1, float beta2, float eps, float weight_decay,
                           bool bias_correction, double* w_sq, double* r_sq) override {
    double* d = sums();
    cuda::lamb_compute_update(params, grads, m, v, update, n, decay, t, beta1, beta2, eps, weight_decay,
                              bias_correction, d, d + 1, stream_);
    double host[2];
    read_back(host, 2);
    *w_sq = host[0];
    *r_sq = host[1];
  }
  void lamb_apply_update(float* params, const float* update, size_t n, float step) override {
    cuda::lamb_apply_update(params, update, n, step, stream_);
  }
  double sum_squares(const float* x, size_t n) override {
    cuda::sum_squares(x, n, sums(), stream_);
    double host = 0;
    read_back(&host, 1);
    return host;
  }
  void scale(float* x, size_t n, float s) override { cuda::scale(x, n, s, stream_); }
  void fill(float* x, size_t n, float value) override { cuda::fill(x, n, value, stream_); }

 private:
  double* sums() {
    if (sums_.size() == 0) sums_.resize(2);
    return sums_.data();
  }
  void read_back(double* host, size_t n) {
    copy_bytes(host, Device::kCpu, sums_.data(), Device::kCuda, n * sizeof(double), stream_);
    stream_sync(stream_);
  }

  Stream stream_{};            // the default stream
  DeviceBuffer<double> sums_;  // the device results of the sums (2 doubles)
};

}  // namespace

OptimKernels& cuda_optim_kernels() {
  require_device(Device::kCuda);
  // Never destroyed: freeing its device array at process exit would race the CUDA runtime's own
  // teardown (as kernels/cuda/reduce.cu's scratch).
  static CudaOptimKernels* const k = new CudaOptimKernels;
  return *k;
}

}  // namespace ms
