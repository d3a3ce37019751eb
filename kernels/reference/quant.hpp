#pragma once
// INT8 weight-only quantisation with one FP32 scale per output row (per channel): the CPU
// twin of the dequantisation kernel, and the quantiser the cuda executor loads with.
#include <cstddef>
#include <cstdint>

namespace kiln::kernels::reference {

/// q[n, k] = round(w[n, k] / scale[n]), scale[n] = max_k |w[n, k]| / 127 (1 for a zero row).
void quantize_rows_int8(const float* w, std::size_t N, std::size_t K, std::int8_t* q, float* scales);
/// out[n, k] = q[n, k] * scale[n]
void dequantize_rows_int8(const std::int8_t* q, const float* scales, std::size_t N, std::size_t K, float* out);

}  // namespace kiln::kernels::reference
