// cuda_check: MS_CUDA_CHECK(call), the checked form of every CUDA runtime call. On an error it
// throws ms::Error (through device.h's device_call_failed) naming file:line, the call as written
// and cudaGetErrorString; the last-error state is cleared first, so a non-sticky error does not
// resurface at a later check. MS_CUDA_CHECK_LAUNCH() checks the last kernel launch.
// Included only by CUDA-built files (device_cuda.cpp, src/kernels/cuda/*.cu): it pulls in
// cuda_runtime.h.
#pragma once
#include <cuda_runtime.h>

#include "base/device.h"  // device_call_failed

#define MS_CUDA_CHECK(call)                                                                  \
  do {                                                                                       \
    const cudaError_t ms_cuda_err_ = (call);                                                 \
    if (ms_cuda_err_ != cudaSuccess) {                                                       \
      (void)cudaGetLastError(); /* a non-sticky error must not resurface at the next check */ \
      ::ms::device_call_failed(__FILE__, __LINE__, #call, static_cast<int>(ms_cuda_err_),    \
                               cudaGetErrorString(ms_cuda_err_));                            \
    }                                                                                        \
  } while (0)

#define MS_CUDA_CHECK_LAUNCH() MS_CUDA_CHECK(cudaGetLastError())
