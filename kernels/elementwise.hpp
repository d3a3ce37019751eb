#pragma once
// Small GPU kernels: embedding gather, KV append by slot, SwiGLU, residual add, F32 -> BF16.
// Launchers only; stream last. Twins: kernels/reference/elementwise.hpp and ops.hpp.
#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace kiln::kernels {

/// out[t, :] = table[ids[t], :]; table [vocab, dim]; ids outside the table give zeros.
cudaError_t launch_embedding_gather(const float* table, int vocab, int dim, const std::int32_t* ids, int T, float* out,
                                    cudaStream_t stream);
/// Row t of k, v ([T, row]) into cache slot slots[t] of k_cache, v_cache ([slots, row]).
cudaError_t launch_kv_append(const float* k, const float* v, const std::int32_t* slots, int T, int row, float* k_cache,
                             float* v_cache, cudaStream_t stream);
/// out[i] = silu(gate[i]) * up[i]
cudaError_t launch_silu_mul(const float* gate, const float* up, float* out, std::int64_t n, cudaStream_t stream);
/// y[t, n] += bias[n] for rows t < T; y: [T, N].
cudaError_t launch_add_bias(float* y, const float* bias, int T, int N, cudaStream_t stream);
/// x[i] += y[i]
cudaError_t launch_residual_add(float* x, const float* y, std::int64_t n, cudaStream_t stream);
/// out[i] = bf16(in[i]), round to nearest even.
cudaError_t launch_f32_to_bf16(const float* in, __nv_bfloat16* out, std::int64_t n, cudaStream_t stream);

/// out[n, k] = bf16(q[n, k] * scales[n]): INT8 weights with per-row scales, ready for a
/// BF16 GEMM. Twin: reference::dequantize_rows_int8.
cudaError_t launch_dequant_int8_bf16(const std::int8_t* q, const float* scales, int N, int K, __nv_bfloat16* out,
                                     cudaStream_t stream);

/// Fills n values with mean + scale * (a seeded, roughly normal draw), as F32 or BF16:
/// random weights made on the device.
cudaError_t launch_fill_random(void* out, bool bf16, std::int64_t n, std::uint64_t seed, float scale, float mean,
                               cudaStream_t stream);

/// Fills n INT8 values uniformly in [-127, 127] from a seed: random quantised weights.
cudaError_t launch_fill_random_int8(std::int8_t* out, std::int64_t n, std::uint64_t seed, cudaStream_t stream);

/// RoPE on x ([T, heads, head_dim]) at positions[t], pairing i with i + head_dim/2;
/// inv_freq: [head_dim / 2]. Twin: reference::rope.
cudaError_t launch_rope(float* x, int T, int heads, int head_dim, const std::int32_t* positions, const float* inv_freq,
                        cudaStream_t stream);

}  // namespace kiln::kernels
