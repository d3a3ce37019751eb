#pragma once
// CPU twin of the RMSNorm kernel: the reference the GPU kernel is tested against and the
// path the CPU executor uses.
#include <cstddef>

namespace kiln::kernels::reference {

/// out[r, :] = x[r, :] / sqrt(mean(x[r, :]^2) + eps) * weight[:]
/// x, out: [rows, dim] row-major (may alias); weight: [dim].
void rmsnorm(const float* x, const float* weight, float* out, std::size_t rows, std::size_t dim,
             float eps);

}  // namespace kiln::kernels::reference
