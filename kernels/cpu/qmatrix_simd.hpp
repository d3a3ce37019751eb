#pragma once
// The x86 vector kernels behind kernels::cpu::gemm (qmatrix_simd.cpp), each compiled for its
// own instruction set and only called where the CPU has it.
#include "kernels/cpu/qmatrix.hpp"

namespace kiln::kernels::cpu::simd {

/// The AVX-512 forms of prepare()'s BF16 rounding and 8-bit quantisation of one row (the
/// same results as the scalar ones); false without AVX-512.
bool to_bf16_row(const float* x, std::size_t K, std::uint16_t* out);
bool quantize_row_u8(const float* x, std::size_t K, std::uint8_t* out, float& scale);
/// sum q[d] * k[d] over d < n with k in BF16; out[d] += a * v[d] with v in BF16 (AVX-512
/// where the CPU has it, else portable loops).
float dot_bf16(const float* q, const std::uint16_t* k, std::size_t n);
void axpy_bf16(float a, const std::uint16_t* v, float* out, std::size_t n);
void axpy(float a, const float* v, float* out, std::size_t n);
/// out[i] = silu(g[i]) * u[i], silu(x) = x / (1 + e^-x): AVX-512 with a degree-6 polynomial
/// e^x (relative error about 2e-7) where the CPU has it, else the reference.
void silu_mul(const float* g, const float* u, float* out, std::size_t n);

/// Runs in.path's kernel for w's dtype; false when there is none.
bool gemm(const prepared_input& in, const qmatrix& w, const float* bias, std::size_t n0, std::size_t n1, float* y,
          std::size_t ldy);

}  // namespace kiln::kernels::cpu::simd
