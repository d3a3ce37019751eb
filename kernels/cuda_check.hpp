#pragma once
// One macro checks every CUDA runtime call and returns the error to the caller.
#include <cuda_runtime.h>

#define KILN_CUDA_TRY(expr)                      \
  do {                                           \
    const cudaError_t kiln_err_ = (expr);        \
    if (kiln_err_ != cudaSuccess) return kiln_err_; \
  } while (0)
