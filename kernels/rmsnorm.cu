#include "kernels/cuda_check.hpp"
#include "kernels/rmsnorm.hpp"

namespace kiln::kernels {

namespace {

constexpr int kThreads = 256;

// One block per row: a block-wide sum of squares, then the scaled write.
__global__ void rmsnorm_kernel(const float* x, const float* weight, float* out, std::size_t dim,
                               float eps) {
  const float* xr = x + blockIdx.x * dim;
  float* outr = out + blockIdx.x * dim;
  float local = 0.f;
  for (std::size_t i = threadIdx.x; i < dim; i += blockDim.x) local += xr[i] * xr[i];
  for (int offset = 16; offset > 0; offset /= 2) local += __shfl_xor_sync(0xffffffffu, local, offset);
  __shared__ float warp_sums[kThreads / 32];
  __shared__ float scale;
  if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = local;
  __syncthreads();
  if (threadIdx.x == 0) {
    float total = 0.f;
    for (int w = 0; w < kThreads / 32; ++w) total += warp_sums[w];
    scale = rsqrtf(total / static_cast<float>(dim) + eps);
  }
  __syncthreads();
  for (std::size_t i = threadIdx.x; i < dim; i += blockDim.x) outr[i] = xr[i] * scale * weight[i];
}

}  // namespace

cudaError_t launch_rmsnorm(const float* x, const float* weight, float* out, std::size_t rows,
                           std::size_t dim, float eps, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  rmsnorm_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(x, weight, out, dim, eps);
  KILN_CUDA_TRY(cudaGetLastError());
  return cudaSuccess;
}

}  // namespace kiln::kernels
