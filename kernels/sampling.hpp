#pragma once
// Sampling on the GPU: greedy, temperature, top-k, top-p, seeded per row, one block per row.
// It follows the rules of its twin (kernels/reference/sampling.hpp) exactly; only float
// summation order differs, which can move a draw that lands on a boundary.
#include <cstdint>

#include <cuda_runtime.h>

#include "kernels/reference/sampling.hpp"

namespace kiln::kernels {

/// logits: [rows, vocab]; params: [rows] (device); tokens: [rows] (device).
cudaError_t launch_sample(const float* logits, int rows, int vocab, const reference::sample_params* params,
                          std::int32_t* tokens, cudaStream_t stream);

}  // namespace kiln::kernels
