#include "kernels/reference/quant.hpp"

#include <algorithm>
#include <cmath>

namespace kiln::kernels::reference {

void quantize_rows_int8(const float* w, std::size_t N, std::size_t K, std::int8_t* q, float* scales) {
  for (std::size_t n = 0; n < N; ++n) {
    float amax = 0.f;
    for (std::size_t k = 0; k < K; ++k) amax = std::max(amax, std::fabs(w[n * K + k]));
    const float s = amax > 0.f ? amax / 127.f : 1.f;
    scales[n] = s;
    for (std::size_t k = 0; k < K; ++k)
      q[n * K + k] = static_cast<std::int8_t>(std::clamp(std::nearbyint(w[n * K + k] / s), -127.f, 127.f));
  }
}

void dequantize_rows_int8(const std::int8_t* q, const float* scales, std::size_t N, std::size_t K, float* out) {
  for (std::size_t n = 0; n < N; ++n)
    for (std::size_t k = 0; k < K; ++k) out[n * K + k] = static_cast<float>(q[n * K + k]) * scales[n];
}

}  // namespace kiln::kernels::reference
