#pragma once
// The x86 vector kernels behind kernels::cpu::gemm (qmatrix_simd.cpp), each compiled for its
// own instruction set and only called where the CPU has it.
#include "kernels/cpu/qmatrix.hpp"

namespace kiln::kernels::cpu::simd {

/// Runs in.path's kernel for w's dtype; false when there is none.
bool gemm(const prepared_input& in, const qmatrix& w, const float* bias, std::size_t n0, std::size_t n1, float* y,
          std::size_t ldy);

}  // namespace kiln::kernels::cpu::simd
