#pragma once
// Weight matrices in their own precision for the CPU executor, and the kernels that multiply
// by them: y[T, N] = x[T, K] . W^T (+ bias) with W in F32, BF16 or INT8 (weight-only, one
// scale per row, as the cuda executor quantises). Each dtype has kernels for several
// instruction sets, chosen at run time from CPUID (best first) or named by tests:
//   f32:  avx512, avx2 (FMA), scalar
//   f16:  avx512, avx2 (F16C; weights widened to F32 in registers, exact), scalar
//   bf16: avx512_bf16 (vdpbf16ps; activations rounded to BF16 per step), avx512, avx2
//         (weights widened to F32 in registers, exact), scalar
//   int8: avx512_vnni, avx_vnni (vpdpbusd; activations quantised per row to 8 bits per
//         step, exact int32 sums), avx512, avx2 (weights widened to F32), scalar
// Accumulation is in F32 (int32 for VNNI). A row's result does not depend on how many rows
// are computed with it, so a sequence decodes the same alone or in any batch.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::kernels::cpu {

enum class wtype : std::uint8_t { f32, bf16, int8, f16 };
std::string_view to_string(wtype t);
/// "f32" | "bf16" | "int8" | "f16"; false for anything else.
bool parse_wtype(std::string_view s, wtype& out);

enum class isa_path : std::uint8_t { scalar, avx2, avx512, avx512_bf16, avx512_vnni, avx_vnni };
std::string_view to_string(isa_path p);

struct cpu_features {
  bool avx2 = false;         ///< with FMA and F16C
  bool avx512 = false;       ///< F, BW, VL
  bool avx512_bf16 = false;
  bool avx512_vnni = false;
  bool avx_vnni = false;
  bool amx = false;          ///< AMX tiles (BF16 and INT8): detected, not used yet
  std::string summary() const;  ///< e.g. "avx2 avx512 avx512_bf16 avx512_vnni avx_vnni"
};
const cpu_features& features();

/// The paths this CPU runs for `t`, best first (scalar always last).
std::vector<isa_path> paths_for(wtype t);

/// A weight matrix [N, K] in its dtype; rows padded with zeros to Kp, a multiple of 64.
struct qmatrix {
  wtype type = wtype::f32;
  std::size_t N = 0, K = 0, Kp = 0;
  std::vector<float> f32;           ///< [N, Kp]
  std::vector<std::uint16_t> bf16;  ///< [N, Kp], BF16 bits (round to nearest even from F32)
  std::vector<std::uint16_t> f16;   ///< [N, Kp], IEEE half bits (round to nearest even from F32)
  std::vector<std::int8_t> q;       ///< [N, Kp]
  std::vector<float> scale;         ///< [N]: row n is q[n] * scale[n]
  std::vector<std::int32_t> qsum;   ///< [N]: sum of q[n] (VNNI's unsigned-activation offset)

  static qmatrix from_f32(const float* w, std::size_t N, std::size_t K, wtype t);
  bool empty() const { return N == 0; }
  /// Bytes one pass over the matrix reads (its elements and scales, padding excluded).
  std::size_t bytes() const;
  /// Row n as F32, K values (what the kernels multiply by, before activation rounding).
  void row(std::size_t n, float* out) const;
};

/// Activations prepared once per matrix product for one dtype and path: padded F32, BF16,
/// or unsigned 8-bit with a scale per row. Reused across steps (capacity kept).
struct prepared_input {
  isa_path path = isa_path::scalar;
  wtype type = wtype::f32;
  std::size_t T = 0, K = 0, Kp = 0;
  std::vector<float> xf;            ///< [T, Kp]
  std::vector<std::uint16_t> xb;    ///< [T, Kp]
  std::vector<std::uint8_t> xu;     ///< [T, Kp]: round(x / xs) + 128
  std::vector<float> xs;            ///< [T]
};
void prepare(const float* x, std::size_t T, std::size_t K, wtype t, isa_path p, prepared_input& out);

/// y[t * ldy + n] for n in [n0, n1): the prepared rows times matrix rows n (+ bias[n]).
/// `in` must have been prepared for w's dtype, K and a path w's dtype runs.
void gemm(const prepared_input& in, const qmatrix& w, const float* bias, std::size_t n0, std::size_t n1, float* y,
          std::size_t ldy);

/// BF16 bits of x, rounded to nearest even (NaN stays NaN); and back.
inline std::uint16_t to_bf16(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>(u >> 16);
}
/// IEEE half bits of x, rounded to nearest even (overflow to infinity, subnormals kept); and back.
std::uint16_t to_f16(float x);
float from_f16(std::uint16_t h);
inline float from_bf16(std::uint16_t b) {
  const std::uint32_t u = static_cast<std::uint32_t>(b) << 16;
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}

}  // namespace kiln::kernels::cpu
