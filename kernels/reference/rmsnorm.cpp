#include "kernels/reference/rmsnorm.hpp"

#include <cmath>

namespace kiln::kernels::reference {

void rmsnorm(const float* x, const float* weight, float* out, std::size_t rows, std::size_t dim,
             float eps) {
  for (std::size_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    float* outr = out + r * dim;
    double sum = 0;
    for (std::size_t i = 0; i < dim; ++i) sum += static_cast<double>(xr[i]) * xr[i];
    const float scale = 1.0f / std::sqrt(static_cast<float>(sum / static_cast<double>(dim)) + eps);
    for (std::size_t i = 0; i < dim; ++i) outr[i] = xr[i] * scale * weight[i];
  }
}

}  // namespace kiln::kernels::reference
