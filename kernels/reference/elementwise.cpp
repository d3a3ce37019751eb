#include "kernels/reference/elementwise.hpp"

#include <algorithm>
#include <cstring>

namespace kiln::kernels::reference {

void embedding_gather(const float* table, std::size_t vocab, std::size_t dim, const std::int32_t* ids, std::size_t T,
                      float* out) {
  for (std::size_t t = 0; t < T; ++t) {
    if (ids[t] < 0 || static_cast<std::size_t>(ids[t]) >= vocab) {
      std::fill(out + t * dim, out + (t + 1) * dim, 0.f);
      continue;
    }
    std::memcpy(out + t * dim, table + static_cast<std::size_t>(ids[t]) * dim, dim * sizeof(float));
  }
}

void kv_append(const float* k, const float* v, const std::int32_t* slots, std::size_t T, std::size_t row,
               float* k_cache, float* v_cache) {
  for (std::size_t t = 0; t < T; ++t) {
    if (slots[t] < 0) continue;
    const auto s = static_cast<std::size_t>(slots[t]);
    std::memcpy(k_cache + s * row, k + t * row, row * sizeof(float));
    std::memcpy(v_cache + s * row, v + t * row, row * sizeof(float));
  }
}

void residual_add(float* x, const float* y, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) x[i] += y[i];
}

}  // namespace kiln::kernels::reference
