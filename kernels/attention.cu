#include <cfloat>

#include "kernels/attention.hpp"

namespace kiln::kernels {

namespace {

constexpr int kPerLane = kMaxAttentionHeadDim / 32;

__device__ float warp_sum(float v) {
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ float warp_max(float v) {
  for (int o = 16; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// One warp per (row, head, split): online softmax over this split's part of the context,
// 32 positions at a time (a lane scores one position, so the key loads run in parallel),
// then the tile's values accumulated into the lane's output dims (lane + 32 j).
// splits == 1 writes the normalised result; else (max, sum, unnormalised acc) per split.
__global__ void attention_kernel(const float* q, paged_kv_view kv, const std::int32_t* row_seq,
                                 const std::int32_t* row_pos, int heads, float scale, int splits, float* partial,
                                 float* out) {
  __shared__ float qs[kMaxAttentionHeadDim];
  const int r = blockIdx.x, h = blockIdx.y, sp = blockIdx.z, lane = threadIdx.x;
  const int hd = kv.head_dim;
  const int kvh = h / (heads / kv.kv_heads);
  const int context = row_pos[r] + 1;
  const int chunk = (context + splits - 1) / splits;
  const int begin = sp * chunk;
  const int end = min(context, begin + chunk);
  const std::int32_t* table = kv.block_tables + static_cast<long long>(row_seq[r]) * kv.max_blocks_per_seq;
  for (int d = lane; d < hd; d += 32) qs[d] = q[(static_cast<long long>(r) * heads + h) * hd + d];
  __syncwarp();
  auto row_of = [&](int p) {
    return ((static_cast<long long>(table[p / kv.block_size]) * kv.block_size + p % kv.block_size) * kv.kv_heads + kvh) * hd;
  };
  float acc[kPerLane];
  for (int j = 0; j < kPerLane; ++j) acc[j] = 0.f;
  float m = -FLT_MAX, l = 0.f;
  for (int base = begin; base < end; base += 32) {
    const int p = base + lane;
    float s = -FLT_MAX;
    if (p < end) {
      const float* kp = kv.k + row_of(p);
      float dot = 0.f;
      for (int d = 0; d < hd; ++d) dot += qs[d] * kp[d];
      s = dot * scale;
    }
    const float nm = fmaxf(m, warp_max(s));
    const float corr = expf(m - nm);
    const float w = p < end ? expf(s - nm) : 0.f;
    l = l * corr + warp_sum(w);
    for (int j = 0; j < kPerLane; ++j) acc[j] *= corr;
    const int count = min(32, end - base);
    for (int t = 0; t < count; ++t) {
      const float wt = __shfl_sync(0xffffffffu, w, t);
      const float* vp = kv.v + row_of(base + t);
      for (int j = 0; j < kPerLane; ++j) {
        const int d = lane + 32 * j;
        if (d < hd) acc[j] += wt * vp[d];
      }
    }
    m = nm;
  }
  if (splits == 1) {
    for (int j = 0; j < kPerLane; ++j) {
      const int d = lane + 32 * j;
      if (d < hd) out[(static_cast<long long>(r) * heads + h) * hd + d] = l > 0.f ? acc[j] / l : 0.f;
    }
    return;
  }
  float* part = partial + ((static_cast<long long>(r) * heads + h) * splits + sp) * (hd + 2);
  if (lane == 0) {
    part[0] = begin < end ? m : -FLT_MAX;
    part[1] = l;
  }
  for (int j = 0; j < kPerLane; ++j) {
    const int d = lane + 32 * j;
    if (d < hd) part[2 + d] = acc[j];
  }
}

__global__ void combine_kernel(const float* partial, int heads, int hd, int splits, float* out) {
  const int r = blockIdx.x, h = blockIdx.y;
  const float* part = partial + (static_cast<long long>(r) * heads + h) * splits * (hd + 2);
  float M = -FLT_MAX;
  for (int s = 0; s < splits; ++s)
    if (part[s * (hd + 2) + 1] > 0.f) M = fmaxf(M, part[s * (hd + 2)]);
  float L = 0.f;
  for (int s = 0; s < splits; ++s) {
    const float* p = part + s * (hd + 2);
    if (p[1] > 0.f) L += p[1] * expf(p[0] - M);
  }
  for (int d = threadIdx.x; d < hd; d += blockDim.x) {
    float v = 0.f;
    for (int s = 0; s < splits; ++s) {
      const float* p = part + s * (hd + 2);
      if (p[1] > 0.f) v += p[2 + d] * expf(p[0] - M);
    }
    out[(static_cast<long long>(r) * heads + h) * hd + d] = L > 0.f ? v / L : 0.f;
  }
}

cudaError_t check_shape(const paged_kv_view& kv, int heads) {
  if (kv.head_dim <= 0 || kv.head_dim > kMaxAttentionHeadDim || kv.kv_heads <= 0 || heads % kv.kv_heads != 0)
    return cudaErrorInvalidValue;
  return cudaSuccess;
}

}  // namespace

cudaError_t launch_paged_decode_attention(const float* q, const paged_kv_view& kv, const attention_rows& rows, int heads,
                                          float scale, int num_splits, float* workspace, float* out, cudaStream_t stream) {
  if (rows.rows <= 0) return cudaSuccess;
  if (auto e = check_shape(kv, heads); e != cudaSuccess) return e;
  if (num_splits <= 1) return launch_prefill_attention(q, kv, rows, heads, scale, out, stream);
  attention_kernel<<<dim3(rows.rows, heads, num_splits), 32, 0, stream>>>(q, kv, rows.seq, rows.pos, heads, scale,
                                                                          num_splits, workspace, out);
  if (auto e = cudaGetLastError(); e != cudaSuccess) return e;
  combine_kernel<<<dim3(rows.rows, heads), 64, 0, stream>>>(workspace, heads, kv.head_dim, num_splits, out);
  return cudaGetLastError();
}

cudaError_t launch_prefill_attention(const float* q, const paged_kv_view& kv, const attention_rows& rows, int heads,
                                     float scale, float* out, cudaStream_t stream) {
  if (rows.rows <= 0) return cudaSuccess;
  if (auto e = check_shape(kv, heads); e != cudaSuccess) return e;
  attention_kernel<<<dim3(rows.rows, heads, 1), 32, 0, stream>>>(q, kv, rows.seq, rows.pos, heads, scale, 1, nullptr, out);
  return cudaGetLastError();
}

}  // namespace kiln::kernels
