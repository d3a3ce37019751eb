#include "kernels/cuda_check.hpp"
#include "kernels/elementwise.hpp"
#include "kernels/reference/sampling.hpp"

namespace kiln::kernels {

namespace {

constexpr int kThreads = 256;

unsigned blocks_for(std::int64_t n) {
  const std::int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 65535 * 64 ? b : 65535 * 64);
}

__global__ void embedding_kernel(const float* table, int vocab, int dim, const std::int32_t* ids, float* out) {
  const int t = blockIdx.x;
  const std::int32_t id = ids[t];
  for (int i = threadIdx.x; i < dim; i += blockDim.x)
    out[static_cast<std::int64_t>(t) * dim + i] = id >= 0 && id < vocab ? table[static_cast<std::int64_t>(id) * dim + i] : 0.f;
}

__global__ void kv_append_kernel(const float* k, const float* v, const std::int32_t* slots, int row, float* kc, float* vc) {
  const int t = blockIdx.x;
  const std::int32_t s = slots[t];
  if (s < 0) return;
  for (int i = threadIdx.x; i < row; i += blockDim.x) {
    kc[static_cast<std::int64_t>(s) * row + i] = k[static_cast<std::int64_t>(t) * row + i];
    vc[static_cast<std::int64_t>(s) * row + i] = v[static_cast<std::int64_t>(t) * row + i];
  }
}

__global__ void silu_mul_kernel(const float* gate, const float* up, float* out, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const float g = gate[i];
    out[i] = g / (1.f + expf(-g)) * up[i];
  }
}

__global__ void residual_add_kernel(float* x, const float* y, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    x[i] += y[i];
}

__global__ void add_bias_kernel(float* y, const float* bias, int N, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    y[i] += bias[i % N];
}

__global__ void dequant_kernel(const std::int8_t* q, const float* scales, int K, std::int64_t n, __nv_bfloat16* out) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    out[i] = __float2bfloat16_rn(static_cast<float>(q[i]) * scales[i / K]);
}

__global__ void to_bf16_kernel(const float* in, __nv_bfloat16* out, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    out[i] = __float2bfloat16_rn(in[i]);
}

__global__ void fill_random_kernel(void* out, bool bf16, std::int64_t n, std::uint64_t seed, float scale, float mean) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    // Sum of four uniforms, centred and scaled to unit variance: close enough to normal.
    const std::uint64_t h = reference::mix64(seed ^ reference::mix64(static_cast<std::uint64_t>(i)));
    float s = 0.f;
    for (int k = 0; k < 4; ++k) s += static_cast<float>((h >> (16 * k)) & 0xffff) / 65536.f;
    const float v = mean + scale * (s - 2.f) * 1.7320508f;
    if (bf16) static_cast<__nv_bfloat16*>(out)[i] = __float2bfloat16_rn(v);
    else static_cast<float*>(out)[i] = v;
  }
}

__global__ void fill_int8_kernel(std::int8_t* out, std::int64_t n, std::uint64_t seed) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    out[i] = static_cast<std::int8_t>(static_cast<int>(reference::mix64(seed ^ reference::mix64(static_cast<std::uint64_t>(i))) % 255) - 127);
}

// One block per row; each thread rotates pairs (i, i + half) of every head.
__global__ void rope_kernel(float* x, int heads, int head_dim, const std::int32_t* positions, const float* inv_freq) {
  const int t = blockIdx.x;
  const int half = head_dim / 2;
  const double pos = positions[t];
  for (int j = threadIdx.x; j < heads * half; j += blockDim.x) {
    const int h = j / half, i = j % half;
    const double angle = pos * static_cast<double>(inv_freq[i]);
    const float c = static_cast<float>(cos(angle)), s = static_cast<float>(sin(angle));
    float* xh = x + (static_cast<std::int64_t>(t) * heads + h) * head_dim;
    const float a = xh[i], b = xh[i + half];
    xh[i] = a * c - b * s;
    xh[i + half] = b * c + a * s;
  }
}

}  // namespace

cudaError_t launch_embedding_gather(const float* table, int vocab, int dim, const std::int32_t* ids, int T, float* out,
                                    cudaStream_t stream) {
  if (T <= 0) return cudaSuccess;
  embedding_kernel<<<T, kThreads, 0, stream>>>(table, vocab, dim, ids, out);
  return cudaGetLastError();
}

cudaError_t launch_kv_append(const float* k, const float* v, const std::int32_t* slots, int T, int row, float* k_cache,
                             float* v_cache, cudaStream_t stream) {
  if (T <= 0) return cudaSuccess;
  kv_append_kernel<<<T, kThreads, 0, stream>>>(k, v, slots, row, k_cache, v_cache);
  return cudaGetLastError();
}

cudaError_t launch_silu_mul(const float* gate, const float* up, float* out, std::int64_t n, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  silu_mul_kernel<<<blocks_for(n), kThreads, 0, stream>>>(gate, up, out, n);
  return cudaGetLastError();
}

cudaError_t launch_residual_add(float* x, const float* y, std::int64_t n, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  residual_add_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x, y, n);
  return cudaGetLastError();
}

cudaError_t launch_add_bias(float* y, const float* bias, int T, int N, cudaStream_t stream) {
  const std::int64_t n = static_cast<std::int64_t>(T) * N;
  if (n <= 0) return cudaSuccess;
  add_bias_kernel<<<blocks_for(n), kThreads, 0, stream>>>(y, bias, N, n);
  return cudaGetLastError();
}

cudaError_t launch_dequant_int8_bf16(const std::int8_t* q, const float* scales, int N, int K, __nv_bfloat16* out,
                                     cudaStream_t stream) {
  const std::int64_t n = static_cast<std::int64_t>(N) * K;
  if (n <= 0) return cudaSuccess;
  dequant_kernel<<<blocks_for(n), kThreads, 0, stream>>>(q, scales, K, n, out);
  return cudaGetLastError();
}

cudaError_t launch_f32_to_bf16(const float* in, __nv_bfloat16* out, std::int64_t n, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  to_bf16_kernel<<<blocks_for(n), kThreads, 0, stream>>>(in, out, n);
  return cudaGetLastError();
}

cudaError_t launch_fill_random(void* out, bool bf16, std::int64_t n, std::uint64_t seed, float scale, float mean,
                               cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  fill_random_kernel<<<blocks_for(n), kThreads, 0, stream>>>(out, bf16, n, seed, scale, mean);
  return cudaGetLastError();
}

cudaError_t launch_fill_random_int8(std::int8_t* out, std::int64_t n, std::uint64_t seed, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  fill_int8_kernel<<<blocks_for(n), kThreads, 0, stream>>>(out, n, seed);
  return cudaGetLastError();
}

cudaError_t launch_rope(float* x, int T, int heads, int head_dim, const std::int32_t* positions, const float* inv_freq,
                        cudaStream_t stream) {
  if (T <= 0) return cudaSuccess;
  rope_kernel<<<T, kThreads, 0, stream>>>(x, heads, head_dim, positions, inv_freq);
  return cudaGetLastError();
}

}  // namespace kiln::kernels
