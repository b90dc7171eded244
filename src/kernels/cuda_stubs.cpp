// cuda_stubs.cpp: in a build without MEGASCALE_WITH_CUDA, the CUDA backends (backend.h,
// optim_kernels.h) are named errors; a CUDA build defines them in backend_cuda.cpp and
// optim_kernels_cuda.cpp instead.
#include "kernels/backend.h"
#include "kernels/optim_kernels.h"

#include "base/check.h"  // ms::Error

#ifndef MEGASCALE_HAVE_CUDA
namespace ms {

KernelBackend& cuda_kernels() {
  require_device(Device::kCuda);  // throws: names the build option
  throw Error("cuda_kernels: megascale was built without MEGASCALE_WITH_CUDA");
}

OptimKernels& cuda_optim_kernels() {
  require_device(Device::kCuda);
  throw Error("cuda_optim_kernels: megascale was built without MEGASCALE_WITH_CUDA");
}

}  // namespace ms
#endif
