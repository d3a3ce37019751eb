#pragma once
// RMSNorm on the GPU. Launcher only; the kernel stays in rmsnorm.cu.
#include <cstddef>

#include <cuda_runtime.h>

namespace kiln::kernels {

/// x, out: device [rows, dim] row-major; weight: device [dim]. Stream last.
cudaError_t launch_rmsnorm(const float* x, const float* weight, float* out, std::size_t rows,
                           std::size_t dim, float eps, cudaStream_t stream);

}  // namespace kiln::kernels
