#include "kernels/cpu/qmatrix.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "kernels/cpu/qmatrix_simd.hpp"
#include "kernels/reference/quant.hpp"

namespace kiln::kernels::cpu {

std::string_view to_string(wtype t) {
  switch (t) {
    case wtype::f32: return "f32";
    case wtype::bf16: return "bf16";
    case wtype::int8: return "int8";
    case wtype::f16: return "f16";
  }
  return "?";
}

bool parse_wtype(std::string_view s, wtype& out) {
  for (wtype t : {wtype::f32, wtype::bf16, wtype::int8, wtype::f16})
    if (s == to_string(t)) {
      out = t;
      return true;
    }
  return false;
}

std::string_view to_string(isa_path p) {
  switch (p) {
    case isa_path::scalar: return "scalar";
    case isa_path::avx2: return "avx2";
    case isa_path::avx512: return "avx512";
    case isa_path::avx512_bf16: return "avx512_bf16";
    case isa_path::avx512_vnni: return "avx512_vnni";
    case isa_path::avx_vnni: return "avx_vnni";
  }
  return "?";
}

const cpu_features& features() {
  static const cpu_features f = [] {
    cpu_features c;
#if defined(__x86_64__)
    __builtin_cpu_init();
    c.avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    c.avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
    c.avx512_bf16 = c.avx512 && __builtin_cpu_supports("avx512bf16");
    c.avx512_vnni = c.avx512 && __builtin_cpu_supports("avx512vnni");
    c.avx_vnni = c.avx2 && __builtin_cpu_supports("avxvnni");
    c.amx = __builtin_cpu_supports("amx-tile") && __builtin_cpu_supports("amx-bf16") && __builtin_cpu_supports("amx-int8");
#endif
    return c;
  }();
  return f;
}

std::string cpu_features::summary() const {
  std::string s;
  auto add = [&](bool on, const char* name) {
    if (on) s += (s.empty() ? "" : " ") + std::string(name);
  };
  add(avx2, "avx2");
  add(avx512, "avx512");
  add(avx512_bf16, "avx512_bf16");
  add(avx512_vnni, "avx512_vnni");
  add(avx_vnni, "avx_vnni");
  add(amx, "amx");
  return s.empty() ? "none" : s;
}

std::vector<isa_path> paths_for(wtype t) {
  const cpu_features& f = features();
  std::vector<isa_path> p;
  if (t == wtype::bf16 && f.avx512_bf16) p.push_back(isa_path::avx512_bf16);
  if (t == wtype::int8 && f.avx512_vnni) p.push_back(isa_path::avx512_vnni);
  if (t == wtype::int8 && f.avx_vnni) p.push_back(isa_path::avx_vnni);
  if (f.avx512) p.push_back(isa_path::avx512);
  if (f.avx2) p.push_back(isa_path::avx2);
  p.push_back(isa_path::scalar);
  return p;
}

std::uint16_t to_f16(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, 4);
  const std::uint16_t sign = static_cast<std::uint16_t>((u >> 16) & 0x8000u);
  const std::uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7e00u);  // NaN
  if (a >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // rounds to infinity
  if (a < 0x38800000u) {
    // A subnormal half (or zero): the value in units of 2^-24, rounded to nearest even.
    if (a < 0x33000000u) return sign;  // below half the smallest subnormal
    const std::uint32_t mant = (a & 0x7fffffu) | 0x800000u;
    const int shift = 126 - static_cast<int>(a >> 23);  // 14 .. 24
    std::uint32_t h = mant >> shift;
    const std::uint32_t rest = mant & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rest > half || (rest == half && (h & 1u))) ++h;
    return static_cast<std::uint16_t>(sign | h);
  }
  // Normal: rebias the exponent, round the 13 dropped bits to nearest even.
  std::uint32_t h = ((a >> 13) - (112u << 10));
  const std::uint32_t rest = a & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;
  return static_cast<std::uint16_t>(sign | h);
}

float from_f16(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  std::uint32_t u;
  if (e == 0) {
    if (m == 0) {
      u = sign;
    } else {  // subnormal: m * 2^-24
      const float v = static_cast<float>(m) * 0x1p-24f;
      std::memcpy(&u, &v, 4);
      u |= sign;
    }
  } else if (e == 31) {
    u = sign | 0x7f800000u | (m << 13);
  } else {
    u = sign | ((e + 112u) << 23) | (m << 13);
  }
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}

qmatrix qmatrix::from_f32(const float* w, std::size_t N, std::size_t K, wtype t) {
  qmatrix m;
  m.type = t;
  m.N = N;
  m.K = K;
  m.Kp = (K + 127) / 128 * 128;
  switch (t) {
    case wtype::f32:
      m.f32.assign(N * m.Kp, 0.f);
      for (std::size_t n = 0; n < N; ++n) std::copy(w + n * K, w + (n + 1) * K, m.f32.begin() + static_cast<std::ptrdiff_t>(n * m.Kp));
      break;
    case wtype::f16:
      m.f16.assign(N * m.Kp, 0);
      for (std::size_t n = 0; n < N; ++n)
        for (std::size_t k = 0; k < K; ++k) m.f16[n * m.Kp + k] = to_f16(w[n * K + k]);
      break;
    case wtype::bf16:
      m.bf16.assign(N * m.Kp, 0);
      for (std::size_t n = 0; n < N; ++n)
        for (std::size_t k = 0; k < K; ++k) m.bf16[n * m.Kp + k] = to_bf16(w[n * K + k]);
      break;
    case wtype::int8: {
      std::vector<std::int8_t> q(N * K);
      m.scale.resize(N);
      reference::quantize_rows_int8(w, N, K, q.data(), m.scale.data());
      m.q.assign(N * m.Kp, 0);
      m.qsum.assign(N, 0);
      for (std::size_t n = 0; n < N; ++n)
        for (std::size_t k = 0; k < K; ++k) {
          m.q[n * m.Kp + k] = q[n * K + k];
          m.qsum[n] += q[n * K + k];
        }
      break;
    }
  }
  return m;
}

std::size_t qmatrix::bytes() const {
  switch (type) {
    case wtype::f32: return N * K * 4;
    case wtype::bf16:
    case wtype::f16: return N * K * 2;
    case wtype::int8: return N * K + N * 4;
  }
  return 0;
}

void qmatrix::row(std::size_t n, float* out) const {
  for (std::size_t k = 0; k < K; ++k) {
    const std::size_t i = n * Kp + k;
    out[k] = type == wtype::f32    ? f32[i]
             : type == wtype::bf16 ? from_bf16(bf16[i])
             : type == wtype::f16  ? from_f16(f16[i])
                                   : static_cast<float>(q[i]) * scale[n];
  }
}

void prepare(const float* x, std::size_t T, std::size_t K, wtype t, isa_path p, prepared_input& out) {
  out.path = p;
  out.type = t;
  out.T = T;
  out.K = K;
  out.Kp = (K + 127) / 128 * 128;
  const std::size_t Kp = out.Kp;
  if (t == wtype::bf16 && p == isa_path::avx512_bf16) {
    out.xb.assign(T * Kp, 0);
    for (std::size_t r = 0; r < T; ++r)
      if (!simd::to_bf16_row(x + r * K, K, &out.xb[r * Kp]))
        for (std::size_t k = 0; k < K; ++k) out.xb[r * Kp + k] = to_bf16(x[r * K + k]);
  } else if (t == wtype::int8 && (p == isa_path::avx512_vnni || p == isa_path::avx_vnni)) {
    // Per row: the largest magnitude maps to 127; stored offset by 128 (vpdpbusd's operand
    // is unsigned; qmatrix::qsum takes the offset back out).
    out.xu.assign(T * Kp, 128);
    out.xs.resize(T);
    for (std::size_t r = 0; r < T; ++r) {
      if (simd::quantize_row_u8(x + r * K, K, &out.xu[r * Kp], out.xs[r])) continue;
      float amax = 0;
      for (std::size_t k = 0; k < K; ++k) amax = std::max(amax, std::fabs(x[r * K + k]));
      const float s = amax > 0 ? amax / 127.f : 1.f;
      out.xs[r] = s;
      const float inv = 1.f / s;
      for (std::size_t k = 0; k < K; ++k) {
        const float q = std::clamp(std::nearbyint(x[r * K + k] * inv), -127.f, 127.f);
        out.xu[r * Kp + k] = static_cast<std::uint8_t>(static_cast<int>(q) + 128);
      }
    }
  } else {
    out.xf.assign(T * Kp, 0.f);
    for (std::size_t r = 0; r < T; ++r) std::copy(x + r * K, x + (r + 1) * K, out.xf.begin() + static_cast<std::ptrdiff_t>(r * Kp));
  }
}

namespace {

// The portable kernel: F32 products of the padded F32 rows and the widened weights, in the
// same chunk order as the vector paths' two accumulators (alternating 16-wide chunks).
void gemm_scalar(const prepared_input& in, const qmatrix& w, const float* bias, std::size_t n0, std::size_t n1, float* y,
                 std::size_t ldy) {
  std::vector<float> row(w.Kp, 0.f);
  for (std::size_t n = n0; n < n1; ++n) {
    w.row(n, row.data());
    for (std::size_t t = 0; t < in.T; ++t) {
      const float* x = in.xf.data() + t * in.Kp;
      float acc[2][16] = {};
      for (std::size_t k = 0; k < in.Kp; ++k) acc[(k / 16) % 2][k % 16] += x[k] * row[k];
      float s = 0;
      for (int l = 0; l < 16; ++l) s += acc[0][l] + acc[1][l];
      y[t * ldy + n] = s + (bias ? bias[n] : 0.f);
    }
  }
}

}  // namespace

void gemm(const prepared_input& in, const qmatrix& w, const float* bias, std::size_t n0, std::size_t n1, float* y,
          std::size_t ldy) {
  if (in.type != w.type || in.Kp != w.Kp) throw std::logic_error("gemm: input prepared for another matrix");
  if (n0 >= n1 || in.T == 0) return;
  if (in.path == isa_path::scalar) return gemm_scalar(in, w, bias, n0, n1, y, ldy);
  if (simd::gemm(in, w, bias, n0, n1, y, ldy)) return;
  throw std::logic_error("gemm: no " + std::string(to_string(in.path)) + " kernel for " + std::string(to_string(w.type)));
}

}  // namespace kiln::kernels::cpu
