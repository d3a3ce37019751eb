#include <cfloat>

#include "kernels/sampling.hpp"

namespace kiln::kernels {

namespace {

constexpr int kThreads = 256;

// Floats as integers that sort the same way.
__device__ int ordered(float f) {
  const int i = __float_as_int(f);
  return i >= 0 ? i : i ^ 0x7fffffff;
}

template <class T, class Op>
__device__ T block_reduce(T v, Op op, T* shared, T identity) {
  for (int o = 16; o > 0; o /= 2) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  if (threadIdx.x % 32 == 0) shared[threadIdx.x / 32] = v;
  __syncthreads();
  if (threadIdx.x < 32) {
    v = threadIdx.x < blockDim.x / 32 ? shared[threadIdx.x] : identity;
    for (int o = 16; o > 0; o /= 2) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
    if (threadIdx.x == 0) shared[0] = v;
  }
  __syncthreads();
  const T out = shared[0];
  __syncthreads();
  return out;
}

struct sum_op {
  template <class T>
  __device__ T operator()(T a, T b) const { return a + b; }
};
struct max_op {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};
struct min_op {
  __device__ int operator()(int a, int b) const { return a < b ? a : b; }
};

__global__ void sample_kernel(const float* logits_all, int vocab, const reference::sample_params* params,
                              std::int32_t* tokens) {
  __shared__ float fshared[32];
  __shared__ int ishared[32];
  const int row = blockIdx.x;
  const float* logits = logits_all + static_cast<long long>(row) * vocab;
  const reference::sample_params p = params[row];
  // argmax, lowest id on ties
  float best = -FLT_MAX;
  for (int i = threadIdx.x; i < vocab; i += blockDim.x) best = fmaxf(best, logits[i]);
  best = block_reduce(best, max_op{}, fshared, -FLT_MAX);
  int best_id = vocab;
  for (int i = threadIdx.x; i < vocab; i += blockDim.x)
    if (logits[i] == best) best_id = min(best_id, i);
  best_id = block_reduce(best_id, min_op{}, ishared, vocab);
  if (p.temperature <= 0.f || p.top_k == 1) {
    if (threadIdx.x == 0) tokens[row] = best_id;
    return;
  }
  // Keep l >= threshold (as an ordered key). Top-k: the k-th largest logit.
  int threshold = ordered(-FLT_MAX) - 1;
  if (p.top_k > 0 && p.top_k < vocab) {
    long long lo = ordered(-FLT_MAX), hi = ordered(best);  // the answer lies in [lo, hi]
    while (lo < hi) {
      const long long mid = lo + (hi - lo + 1) / 2;
      int count = 0;
      for (int i = threadIdx.x; i < vocab; i += blockDim.x) count += ordered(logits[i]) >= mid;
      count = block_reduce(count, sum_op{}, ishared, 0);
      if (count >= p.top_k) lo = mid;
      else hi = mid - 1;
    }
    threshold = static_cast<int>(lo);
  }
  auto prob = [&](int i) { return expf((logits[i] - best) / p.temperature); };
  if (p.top_p < 1.f) {
    float total = 0.f;
    for (int i = threadIdx.x; i < vocab; i += blockDim.x)
      if (ordered(logits[i]) >= threshold) total += prob(i);
    total = block_reduce(total, sum_op{}, fshared, 0.f);
    long long lo = threshold, hi = ordered(best);
    while (lo < hi) {
      const long long mid = lo + (hi - lo + 1) / 2;
      float mass = 0.f;
      for (int i = threadIdx.x; i < vocab; i += blockDim.x)
        if (ordered(logits[i]) >= mid) mass += prob(i);
      mass = block_reduce(mass, sum_op{}, fshared, 0.f);
      if (mass >= p.top_p * total) lo = mid;
      else hi = mid - 1;
    }
    threshold = static_cast<int>(lo);
  }
  // Inverse CDF over kept tokens in id order: each thread owns a contiguous run of ids.
  const int per = (vocab + blockDim.x - 1) / blockDim.x;
  const int first = threadIdx.x * per, last = min(vocab, first + per);
  float mine = 0.f;
  for (int i = first; i < last; ++i)
    if (ordered(logits[i]) >= threshold) mine += prob(i);
  __shared__ float prefix[kThreads];
  prefix[threadIdx.x] = mine;
  __syncthreads();
  if (threadIdx.x == 0) {
    float run = 0.f;
    for (int t = 0; t < blockDim.x; ++t) {
      const float x = prefix[t];
      prefix[t] = run;
      run += x;
    }
    fshared[0] = run;
  }
  __syncthreads();
  const float total = fshared[0];
  const float u = static_cast<float>(reference::sample_uniform(p.seed, p.position)) * total;
  __shared__ int chosen;
  if (threadIdx.x == 0) chosen = -1;
  __syncthreads();
  float before = prefix[threadIdx.x];
  if (u >= before && u < before + mine) {
    float left = u - before;
    for (int i = first; i < last; ++i) {
      if (ordered(logits[i]) < threshold) continue;
      left -= prob(i);
      if (left < 0.f) {
        atomicMax(&chosen, i);
        break;
      }
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    int c = chosen;
    if (c < 0)  // rounding left the draw past the end: the last kept token
      for (int i = vocab - 1; i >= 0; --i)
        if (ordered(logits[i]) >= threshold) {
          c = i;
          break;
        }
    tokens[row] = c;
  }
}

}  // namespace

cudaError_t launch_sample(const float* logits, int rows, int vocab, const reference::sample_params* params,
                          std::int32_t* tokens, cudaStream_t stream) {
  if (rows <= 0) return cudaSuccess;
  sample_kernel<<<rows, kThreads, 0, stream>>>(logits, vocab, params, tokens);
  return cudaGetLastError();
}

}  // namespace kiln::kernels
