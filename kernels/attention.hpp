#pragma once
// Paged attention with GQA on the GPU. Decode: each row is a sequence's newest token, and
// long contexts are split into `num_splits` parts whose partial softmax results a second
// kernel combines. Prefill: the rows of prompt chunks, each attending causally to its
// sequence's cache (earlier chunks included). Twin: reference::paged_attention_row.
#include <cuda_runtime.h>

#include "kernels/paged_kv.hpp"

namespace kiln::kernels {

constexpr int kMaxAttentionHeadDim = 256;

/// Floats of workspace a decode launch with `num_splits` > 1 needs.
inline long long decode_attention_workspace_floats(int rows, int heads, int head_dim, int num_splits) {
  return static_cast<long long>(rows) * heads * num_splits * (head_dim + 2);
}

/// q, out: [rows, heads, head_dim]; every pointer on the device.
cudaError_t launch_paged_decode_attention(const float* q, const paged_kv_view& kv, const attention_rows& rows, int heads,
                                          float scale, int num_splits, float* workspace, float* out, cudaStream_t stream);
cudaError_t launch_prefill_attention(const float* q, const paged_kv_view& kv, const attention_rows& rows, int heads,
                                     float scale, float* out, cudaStream_t stream);

}  // namespace kiln::kernels
