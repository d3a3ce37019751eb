#pragma once
// CPU twins of the small kernels: embedding gather, KV append, residual add.
#include <cstddef>
#include <cstdint>

namespace kiln::kernels::reference {

/// out[t, :] = table[ids[t], :]; table: [vocab, dim]. Ids outside [0, vocab) give zeros.
void embedding_gather(const float* table, std::size_t vocab, std::size_t dim, const std::int32_t* ids, std::size_t T,
                      float* out);

/// Writes row t of k and v ([T, kv_heads * head_dim]) into cache slot slots[t] (= block *
/// block_size + offset) of k_cache / v_cache ([slots][kv_heads * head_dim]); negative slots skip.
void kv_append(const float* k, const float* v, const std::int32_t* slots, std::size_t T, std::size_t row,
               float* k_cache, float* v_cache);

/// x[i] += y[i]
void residual_add(float* x, const float* y, std::size_t n);

}  // namespace kiln::kernels::reference
