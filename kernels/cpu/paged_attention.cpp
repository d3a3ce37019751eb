#include "kernels/cpu/paged_attention.hpp"

#include <algorithm>
#include <cmath>

#include "kernels/cpu/qmatrix.hpp"

namespace kiln::kernels::cpu {

void store_bf16(const float* src, std::size_t n, std::uint16_t* dst) {
  for (std::size_t i = 0; i < n; ++i) dst[i] = to_bf16(src[i]);
}

namespace {

// A key or value row of KV head kvh as F32: in place for an F32 cache, widened into `wide`
// for a BF16 one.
const float* kv_row(const reference::paged_kv_layer& kv, bool key, std::int32_t block, std::size_t slot, std::size_t kvh, float*) {
  return (key ? kv.k_at(block, slot) : kv.v_at(block, slot)) + kvh * kv.head_dim;
}
const float* kv_row(const paged_kv_bf16& kv, bool key, std::int32_t block, std::size_t slot, std::size_t kvh, float* wide) {
  const std::uint16_t* src = (key ? kv.k_at(block, slot) : kv.v_at(block, slot)) + kvh * kv.head_dim;
  for (std::size_t d = 0; d < kv.head_dim; ++d) wide[d] = from_bf16(src[d]);
  return wide;
}

template <class KV>
void attend(const float* q, const KV& kv, const std::int32_t* table, std::size_t context, std::size_t heads, std::size_t kvh,
            float scale, float* out, float* scratch) {
  const std::size_t hd = kv.head_dim, group = heads / kv.kv_heads;
  float* wide = scratch + group * context;
  for (std::size_t p = 0; p < context; ++p) {
    const float* k = kv_row(kv, true, table[p / kv.block_size], p % kv.block_size, kvh, wide);
    for (std::size_t g = 0; g < group; ++g) scratch[g * context + p] = reference::dot(q + (kvh * group + g) * hd, k, hd) * scale;
  }
  std::vector<float> denom(group, 0.f);
  for (std::size_t g = 0; g < group; ++g) {
    float* s = scratch + g * context;
    const float max_score = *std::max_element(s, s + context);
    for (std::size_t p = 0; p < context; ++p) {
      s[p] = std::exp(s[p] - max_score);
      denom[g] += s[p];
    }
    std::fill(out + (kvh * group + g) * hd, out + (kvh * group + g + 1) * hd, 0.f);
  }
  for (std::size_t p = 0; p < context; ++p) {
    const float* v = kv_row(kv, false, table[p / kv.block_size], p % kv.block_size, kvh, wide);
    for (std::size_t g = 0; g < group; ++g) {
      const float wgt = scratch[g * context + p] / denom[g];
      float* oh = out + (kvh * group + g) * hd;
      for (std::size_t d = 0; d < hd; ++d) oh[d] += wgt * v[d];
    }
  }
}

}  // namespace

void attend_kv_group(const float* q, const reference::paged_kv_layer& kv, const std::int32_t* block_table,
                     std::size_t context, std::size_t heads, std::size_t kvh, float scale, float* out, float* scratch) {
  attend(q, kv, block_table, context, heads, kvh, scale, out, scratch);
}

void attend_kv_group(const float* q, const paged_kv_bf16& kv, const std::int32_t* block_table, std::size_t context,
                     std::size_t heads, std::size_t kvh, float scale, float* out, float* scratch) {
  attend(q, kv, block_table, context, heads, kvh, scale, out, scratch);
}

}  // namespace kiln::kernels::cpu
