#include "kernels/cpu/paged_attention.hpp"

#include <algorithm>
#include <cmath>

#include "kernels/cpu/qmatrix.hpp"
#include "kernels/cpu/qmatrix_simd.hpp"

namespace kiln::kernels::cpu {

void store_bf16(const float* src, std::size_t n, std::uint16_t* dst) {
  for (std::size_t i = 0; i < n; ++i) dst[i] = to_bf16(src[i]);
}

namespace {

// Attention of one KV head's query group, the cache read row by row in place (F32) or
// through the BF16 helpers.
struct f32_rows {
  const reference::paged_kv_layer& kv;
  const float* k(std::int32_t b, std::size_t s, std::size_t kvh) const { return kv.k_at(b, s) + kvh * kv.head_dim; }
  const float* v(std::int32_t b, std::size_t s, std::size_t kvh) const { return kv.v_at(b, s) + kvh * kv.head_dim; }
  static float dot(const float* q, const float* k, std::size_t n) { return reference::dot(q, k, n); }
  static void axpy(float a, const float* v, float* out, std::size_t n) { simd::axpy(a, v, out, n); }
};
struct bf16_rows {
  const paged_kv_bf16& kv;
  const std::uint16_t* k(std::int32_t b, std::size_t s, std::size_t kvh) const { return kv.k_at(b, s) + kvh * kv.head_dim; }
  const std::uint16_t* v(std::int32_t b, std::size_t s, std::size_t kvh) const { return kv.v_at(b, s) + kvh * kv.head_dim; }
  static float dot(const float* q, const std::uint16_t* k, std::size_t n) { return simd::dot_bf16(q, k, n); }
  static void axpy(float a, const std::uint16_t* v, float* out, std::size_t n) { simd::axpy_bf16(a, v, out, n); }
};

template <class Rows, class KV>
void attend(const Rows& rows, const float* q, const KV& kv, const std::int32_t* table, std::size_t context, std::size_t heads,
            std::size_t kvh, float scale, float* out, float* scratch) {
  const std::size_t hd = kv.head_dim, group = heads / kv.kv_heads;
  for (std::size_t p = 0; p < context; ++p) {
    const auto* k = rows.k(table[p / kv.block_size], p % kv.block_size, kvh);
    for (std::size_t g = 0; g < group; ++g) scratch[g * context + p] = Rows::dot(q + (kvh * group + g) * hd, k, hd) * scale;
  }
  for (std::size_t g = 0; g < group; ++g) {
    float* s = scratch + g * context;
    const float max_score = *std::max_element(s, s + context);
    float denom = 0;
    for (std::size_t p = 0; p < context; ++p) {
      s[p] = std::exp(s[p] - max_score);
      denom += s[p];
    }
    const float inv = 1.f / denom;
    for (std::size_t p = 0; p < context; ++p) s[p] *= inv;
    std::fill(out + (kvh * group + g) * hd, out + (kvh * group + g + 1) * hd, 0.f);
  }
  for (std::size_t p = 0; p < context; ++p) {
    const auto* v = rows.v(table[p / kv.block_size], p % kv.block_size, kvh);
    for (std::size_t g = 0; g < group; ++g) Rows::axpy(scratch[g * context + p], v, out + (kvh * group + g) * hd, hd);
  }
}

}  // namespace

void attend_kv_group(const float* q, const reference::paged_kv_layer& kv, const std::int32_t* block_table,
                     std::size_t context, std::size_t heads, std::size_t kvh, float scale, float* out, float* scratch) {
  attend(f32_rows{kv}, q, kv, block_table, context, heads, kvh, scale, out, scratch);
}

void attend_kv_group(const float* q, const paged_kv_bf16& kv, const std::int32_t* block_table, std::size_t context,
                     std::size_t heads, std::size_t kvh, float scale, float* out, float* scratch) {
  attend(bf16_rows{kv}, q, kv, block_table, context, heads, kvh, scale, out, scratch);
}

}  // namespace kiln::kernels::cpu
