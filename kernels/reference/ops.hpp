#pragma once
// CPU twins of kiln's transformer kernels: the CPU executor runs them, and the GPU kernels are
// tested against them. Plain functions over raw pointers; shapes are in the comments.
#include <cstddef>
#include <cstdint>

namespace kiln::kernels::reference {

/// sum(a[i] * b[i]); AVX2/FMA when the CPU has them, a portable loop otherwise.
float dot(const float* a, const float* b, std::size_t n);

/// y[t, n] = x[t, :] . w[n, :] (+ bias[n]) for rows t < T and outputs n in [n_begin, n_end).
/// x: [T, K]; w: [N, K] row-major (as Hugging Face stores projections); y: [T, N]; bias: [N] or null.
void matmul_xwt(const float* x, std::size_t T, std::size_t K, const float* w, const float* bias, std::size_t N,
                std::size_t n_begin, std::size_t n_end, float* y);

/// RoPE inverse frequencies, [head_dim / 2]: theta^(-2i/head_dim), with Llama 3 scaling when
/// factor > 0 (low/high frequency factors and the original context length as in config.json).
void rope_inv_freq(std::size_t head_dim, double theta, double llama3_factor, double low_freq_factor,
                   double high_freq_factor, double original_max_position, float* inv_freq);

/// Rotates each head of x ([heads, head_dim]) at `position`, pairing i with i + head_dim/2.
void rope(float* x, std::size_t heads, std::size_t head_dim, std::int64_t position, const float* inv_freq);

/// out[i] = silu(gate[i]) * up[i]
void silu_mul(const float* gate, const float* up, float* out, std::size_t n);

/// Paged K/V of one layer: k and v are [num_blocks, block_size, kv_heads, head_dim].
struct paged_kv_layer {
  float* k = nullptr;
  float* v = nullptr;
  std::size_t block_size = 16;
  std::size_t kv_heads = 0;
  std::size_t head_dim = 0;
  float* k_at(std::int32_t block, std::size_t slot) const { return k + (static_cast<std::size_t>(block) * block_size + slot) * kv_heads * head_dim; }
  float* v_at(std::int32_t block, std::size_t slot) const { return v + (static_cast<std::size_t>(block) * block_size + slot) * kv_heads * head_dim; }
};

/// One query row attending causally over `context` positions of one sequence, whose block
/// table maps position p to block table[p / block_size]. GQA: query head h reads KV head
/// h / (heads / kv_heads). q, out: [heads, head_dim]; scratch: [context] floats.
void paged_attention_row(const float* q, const paged_kv_layer& kv, const std::int32_t* block_table,
                         std::size_t context, std::size_t heads, float scale, float* out, float* scratch);

}  // namespace kiln::kernels::reference
