#pragma once
// Attention over the paged KV cache, F32 or BF16, for one query row and one KV head: the
// query heads that share it (GQA) go together, so each key and value is read (and, in BF16,
// widened) once for the group. The executor runs (row, KV head) pairs in parallel. The math
// per head is reference::paged_attention_row's.
#include <cstddef>
#include <cstdint>

#include "kernels/reference/ops.hpp"

namespace kiln::kernels::cpu {

struct paged_kv_bf16 {
  std::uint16_t* k = nullptr;
  std::uint16_t* v = nullptr;
  std::size_t block_size = 16;
  std::size_t kv_heads = 0;
  std::size_t head_dim = 0;
  std::uint16_t* k_at(std::int32_t block, std::size_t slot) const { return k + (static_cast<std::size_t>(block) * block_size + slot) * kv_heads * head_dim; }
  std::uint16_t* v_at(std::int32_t block, std::size_t slot) const { return v + (static_cast<std::size_t>(block) * block_size + slot) * kv_heads * head_dim; }
};

/// Writes n floats as BF16 (round to nearest even).
void store_bf16(const float* src, std::size_t n, std::uint16_t* dst);

/// Query heads kvh * group .. (kvh + 1) * group - 1 of one row (q, out: [heads, head_dim])
/// over `context` positions; scratch: group * context + head_dim floats.
void attend_kv_group(const float* q, const reference::paged_kv_layer& kv, const std::int32_t* block_table,
                     std::size_t context, std::size_t heads, std::size_t kvh, float scale, float* out, float* scratch);
void attend_kv_group(const float* q, const paged_kv_bf16& kv, const std::int32_t* block_table, std::size_t context,
                     std::size_t heads, std::size_t kvh, float scale, float* out, float* scratch);

}  // namespace kiln::kernels::cpu
