#include "kernels/cpu/qmatrix_simd.hpp"

#if defined(__x86_64__)
#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "kernels/reference/ops.hpp"

// GCC 12's _mm512_reduce_* and _mm512_extractf64x4_pd start from an undefined vector
// (`__Y = __Y` in its own headers), which trips its -Wuninitialized and -Wmaybe-uninitialized.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace kiln::kernels::cpu::simd {

namespace {

// Every kernel: tiles of R rows by C outputs, each (row, output) one accumulator over the
// chunks in order, so a row's result is the same in any tile and any batch. Wide tiles (4 x
// 4) load each activation and weight chunk once for 16 multiply-adds; one row runs 1 x 4,
// four independent chains. P supplies the chunk width, loads, multiply-add and the
// reduction of one accumulator.
// How far ahead of its loads a kernel prefetches the weight stream (measured on the
// development machine: 8 KiB beat 0, 1, 2, 4 and 16 KiB overall).
constexpr std::size_t kPrefetchBytes = 8192;

#define KILN_ROWS_LOOP                                                                                    \
  template <std::size_t R, std::size_t C, class P>                                                         \
  inline void tile(const P& p, std::size_t Kp, const float* bias, std::size_t t, std::size_t n, float* y, \
                   std::size_t ldy) {                                                                     \
    typename P::acc a[R][C];                                                                              \
    _Pragma("GCC unroll 4") for (std::size_t r = 0; r < R; ++r)                                        \
      _Pragma("GCC unroll 4") for (std::size_t c = 0; c < C; ++c) a[r][c] = p.zero();                                             \
    for (std::size_t k = 0; k < Kp; k += P::step) {                                                       \
      decltype(p.w(0, 0)) w[C];                                                                           \
      _Pragma("GCC unroll 4") for (std::size_t c = 0; c < C; ++c) {                                     \
        /* the stream runs ahead of the loads (rows are contiguous: into later rows) */                 \
        _mm_prefetch(p.row(n + c) + (k + kPrefetchBytes / P::esize) * P::esize, _MM_HINT_T0);           \
        w[c] = p.w(n + c, k);                                                                           \
      }                                                                                                 \
      _Pragma("GCC unroll 4") for (std::size_t r = 0; r < R; ++r) {                                    \
        const auto x = p.x(t + r, k);                                                                     \
        _Pragma("GCC unroll 4") for (std::size_t c = 0; c < C; ++c) a[r][c] = p.fma(a[r][c], x, w[c]);                            \
      }                                                                                                   \
    }                                                                                                     \
    _Pragma("GCC unroll 4") for (std::size_t r = 0; r < R; ++r) {                                      \
      /* Four accumulators reduce together; the tree each one takes never depends on the others. */       \
      const typename P::acc z = p.zero();                                                                 \
      float sums[4];                                                                                      \
      p.reduce4(a[r][0], C > 1 ? a[r][C > 1 ? 1 : 0] : z, C > 2 ? a[r][C > 2 ? 2 : 0] : z,                  \
                C > 3 ? a[r][C > 3 ? 3 : 0] : z, t + r, n, sums);                                            \
      _Pragma("GCC unroll 4") for (std::size_t c = 0; c < C; ++c)                                       \
        y[(t + r) * ldy + n + c] = sums[c] + (bias ? bias[n + c] : 0.f);                                  \
    }                                                                                                     \
  }                                                                                                       \
  template <std::size_t RW, std::size_t CW, class P>                                                       \
  void rows_loop(const P& p, std::size_t T, std::size_t Kp, const float* bias, std::size_t n0,            \
                 std::size_t n1, float* y, std::size_t ldy) {                                             \
    std::size_t n = n0;                                                                                   \
    for (; n + CW <= n1; n += CW) {                                                                       \
      std::size_t t = 0;                                                                                  \
      for (; t + RW <= T; t += RW) tile<RW, CW>(p, Kp, bias, t, n, y, ldy);                               \
      for (; t < T; ++t) tile<1, CW>(p, Kp, bias, t, n, y, ldy);                                          \
    }                                                                                                     \
    for (; n < n1; ++n)                                                                                   \
      for (std::size_t t = 0; t < T; ++t) tile<1, 1>(p, Kp, bias, t, n, y, ldy);                          \
  }

// ---- AVX2 + FMA: F32, and BF16 / INT8 widened to F32 in registers ----
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")

namespace avx2 {

// The four sums of a, b, c, d (8 lanes each), by one tree whatever the other three hold.
inline __m128 sum4(__m256 a, __m256 b, __m256 c, __m256 d) {
  const __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(a, b), _mm256_hadd_ps(c, d));
  return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}
inline __m128i sum4(__m256i a, __m256i b, __m256i c, __m256i d) {
  const __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(a, b), _mm256_hadd_epi32(c, d));
  return _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}

struct base {
  using acc = __m256;
  static constexpr std::size_t step = 8;
  const prepared_input& in;
  const qmatrix& m;
  acc zero() const { return _mm256_setzero_ps(); }
  __m256 x(std::size_t t, std::size_t k) const { return _mm256_loadu_ps(in.xf.data() + t * in.Kp + k); }
  acc fma(acc a, __m256 x, __m256 w) const { return _mm256_fmadd_ps(x, w, a); }
  void reduce4(acc a, acc b, acc c, acc d, std::size_t, std::size_t, float* out) const { _mm_storeu_ps(out, sum4(a, b, c, d)); }
};
struct f32 : base {
  const char* row(std::size_t n) const { return reinterpret_cast<const char*>(m.f32.data() + n * m.Kp); }
  static constexpr std::size_t esize = 4;
  __m256 w(std::size_t n, std::size_t k) const { return _mm256_loadu_ps(m.f32.data() + n * m.Kp + k); }
};
struct bf16 : base {
  const char* row(std::size_t n) const { return reinterpret_cast<const char*>(m.bf16.data() + n * m.Kp); }
  static constexpr std::size_t esize = 2;
  __m256 w(std::size_t n, std::size_t k) const {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(m.bf16.data() + n * m.Kp + k));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
};
struct f16 : base {
  const char* row(std::size_t n) const { return reinterpret_cast<const char*>(m.f16.data() + n * m.Kp); }
  static constexpr std::size_t esize = 2;
  __m256 w(std::size_t n, std::size_t k) const {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(m.f16.data() + n * m.Kp + k)));
  }
};
struct int8 : base {
  const char* row(std::size_t n) const { return reinterpret_cast<const char*>(m.q.data() + n * m.Kp); }
  static constexpr std::size_t esize = 1;
  __m256 w(std::size_t n, std::size_t k) const {
    const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(m.q.data() + n * m.Kp + k));
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b));
  }
  void reduce4(acc a, acc b, acc c, acc d, std::size_t, std::size_t n, float* out) const {
    _mm_storeu_ps(out, sum4(a, b, c, d));
    for (std::size_t i = 0; i < 4 && n + i < m.N; ++i) out[i] *= m.scale[n + i];
  }
};

// AVX-VNNI (256-bit vpdpbusd): unsigned 8-bit activations times the signed weights.
struct vnni {
  using acc = __m256i;
  static constexpr std::size_t step = 32;
  const prepared_input& in;
  const qmatrix& m;
  acc zero() const { return _mm256_setzero_si256(); }
  __m256i x(std::size_t t, std::size_t k) const {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in.xu.data() + t * in.Kp + k));
  }
  const char* row(std::size_t n) const { return reinterpret_cast<const char*>(m.q.data() + n * m.Kp); }
  static constexpr std::size_t esize = 1;
  __m256i w(std::size_t n, std::size_t k) const {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(m.q.data() + n * m.Kp + k));
  }
  void reduce4(acc a, acc b, acc c, acc d, std::size_t t, std::size_t n, float* out) const {
    alignas(16) std::int32_t sums[4];
    _mm_store_si128(reinterpret_cast<__m128i*>(sums), sum4(a, b, c, d));
    for (std::size_t i = 0; i < 4 && n + i < m.N; ++i)
      out[i] = in.xs[t] * m.scale[n + i] * static_cast<float>(sums[i] - 128LL * m.qsum[n + i]);
  }
};

KILN_ROWS_LOOP

}  // namespace avx2

#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx2,fma,avxvnni")
namespace avx2 {
__m256i vnni_fma(__m256i a, __m256i x, __m256i w) { return _mm256_dpbusd_avx_epi32(a, x, w); }
struct vnni_op : vnni {
  acc fma(acc a, __m256i x, __m256i w) const { return vnni_fma(a, x, w); }
};
template void rows_loop<4, 2, vnni_op>(const vnni_op&, std::size_t, std::size_t, const float*, std::size_t, std::size_t,
                                       float*, std::size_t);
}  // namespace avx2
#pragma GCC pop_options

// ---- AVX-512: F32, BF16 / INT8 widened; AVX512-BF16 vdpbf16ps; AVX512-VNNI vpdpbusd ----
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512bf16,avx512vnni,avx2,fma")

namespace avx512 {

inline __m256 halves(__m512 v) {
  return _mm256_add_ps(_mm512_castps512_ps256(v), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
}
inline __m256i halves(__m512i v) { return _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1)); }
inline void store4(__m512 a, __m512 b, __m512 c, __m512 d, float* out) {
  _mm_storeu_ps(out, avx2::sum4(halves(a), halves(b), halves(c), halves(d)));
}

struct base {
  using acc = __m512;
  static constexpr std::size_t step = 16;
  const prepared_input& in;
  const qmatrix& m;
  acc zero() const { return _mm512_setzero_ps(); }
  __m512 x(std::size_t t, std::size_t k) const { return _mm512_loadu_ps(in.xf.data() + t * in.Kp + k); }
  acc fma(acc a, __m512 x, __m512 w) const { return _mm512_fmadd_ps(x, w, a); }
  void reduce4(acc a, acc b, acc c, acc d, std::size_t, std::size_t, float* out) const { store4(a, b, c, d, out); }
};
struct f32 : base {
  const char* row(std::size_t n) const { return reinterpret_cast<const char*>(m.f32.data() + n * m.Kp); }
  static constexpr std::size_t esize = 4;
  __m512 w(std::size_t n, std::size_t k) const { return _mm512_loadu_ps(m.f32.data() + n * m.Kp + k); }
};
struct bf16 : base {
  const char* row(std::size_t n) const { return reinterpret_cast<const char*>(m.bf16.data() + n * m.Kp); }
  static constexpr std::size_t esize = 2;
  __m512 w(std::size_t n, std::size_t k) const {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(m.bf16.data() + n * m.Kp + k));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
};
struct f16 : base {
  const char* row(std::size_t n) const { return reinterpret_cast<const char*>(m.f16.data() + n * m.Kp); }
  static constexpr std::size_t esize = 2;
  __m512 w(std::size_t n, std::size_t k) const {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(m.f16.data() + n * m.Kp + k)));
  }
};
struct int8 : base {
  const char* row(std::size_t n) const { return reinterpret_cast<const char*>(m.q.data() + n * m.Kp); }
  static constexpr std::size_t esize = 1;
  __m512 w(std::size_t n, std::size_t k) const {
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(m.q.data() + n * m.Kp + k));
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(b));
  }
  void reduce4(acc a, acc b, acc c, acc d, std::size_t, std::size_t n, float* out) const {
    store4(a, b, c, d, out);
    for (std::size_t i = 0; i < 4 && n + i < m.N; ++i) out[i] *= m.scale[n + i];
  }
};
struct bf16_dot {
  using acc = __m512;
  static constexpr std::size_t step = 32;
  const prepared_input& in;
  const qmatrix& m;
  acc zero() const { return _mm512_setzero_ps(); }
  __m512bh x(std::size_t t, std::size_t k) const { return (__m512bh)_mm512_loadu_si512(in.xb.data() + t * in.Kp + k); }
  const char* row(std::size_t n) const { return reinterpret_cast<const char*>(m.bf16.data() + n * m.Kp); }
  static constexpr std::size_t esize = 2;
  __m512bh w(std::size_t n, std::size_t k) const { return (__m512bh)_mm512_loadu_si512(m.bf16.data() + n * m.Kp + k); }
  acc fma(acc a, __m512bh x, __m512bh w) const { return _mm512_dpbf16_ps(a, x, w); }
  void reduce4(acc a, acc b, acc c, acc d, std::size_t, std::size_t, float* out) const { store4(a, b, c, d, out); }
};
struct vnni {
  using acc = __m512i;
  static constexpr std::size_t step = 64;
  const prepared_input& in;
  const qmatrix& m;
  acc zero() const { return _mm512_setzero_si512(); }
  __m512i x(std::size_t t, std::size_t k) const { return _mm512_loadu_si512(in.xu.data() + t * in.Kp + k); }
  const char* row(std::size_t n) const { return reinterpret_cast<const char*>(m.q.data() + n * m.Kp); }
  static constexpr std::size_t esize = 1;
  __m512i w(std::size_t n, std::size_t k) const { return _mm512_loadu_si512(m.q.data() + n * m.Kp + k); }
  acc fma(acc a, __m512i x, __m512i w) const { return _mm512_dpbusd_epi32(a, x, w); }
  void reduce4(acc a, acc b, acc c, acc d, std::size_t t, std::size_t n, float* out) const {
    alignas(16) std::int32_t sums[4];
    _mm_store_si128(reinterpret_cast<__m128i*>(sums), avx2::sum4(halves(a), halves(b), halves(c), halves(d)));
    for (std::size_t i = 0; i < 4 && n + i < m.N; ++i)
      out[i] = in.xs[t] * m.scale[n + i] * static_cast<float>(sums[i] - 128LL * m.qsum[n + i]);
  }
};

KILN_ROWS_LOOP

void to_bf16_row(const float* x, std::size_t K, std::uint16_t* out) {
  std::size_t k = 0;
  for (; k + 32 <= K; k += 32) {
    const __m512bh h = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(x + k + 16), _mm512_loadu_ps(x + k));
    _mm512_storeu_si512(out + k, (__m512i)h);
  }
  for (; k < K; ++k) out[k] = kernels::cpu::to_bf16(x[k]);
}

void quantize_row_u8(const float* x, std::size_t K, std::uint8_t* out, float& scale) {
  __m512 mx = _mm512_setzero_ps();
  std::size_t k = 0;
  for (; k + 16 <= K; k += 16) mx = _mm512_max_ps(mx, _mm512_abs_ps(_mm512_loadu_ps(x + k)));
  float amax = _mm512_reduce_max_ps(mx);
  for (std::size_t i = k; i < K; ++i) amax = std::max(amax, std::fabs(x[i]));
  scale = amax > 0 ? amax / 127.f : 1.f;
  const float inv = 1.f / scale;
  const __m512 vinv = _mm512_set1_ps(inv), lo = _mm512_set1_ps(-127.f), hi = _mm512_set1_ps(127.f);
  const __m512i offset = _mm512_set1_epi32(128);
  for (k = 0; k + 16 <= K; k += 16) {
    const __m512 q = _mm512_min_ps(hi, _mm512_max_ps(lo, _mm512_roundscale_ps(_mm512_mul_ps(_mm512_loadu_ps(x + k), vinv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + k), _mm512_cvtepi32_epi8(_mm512_add_epi32(_mm512_cvtps_epi32(q), offset)));
  }
  for (; k < K; ++k) {
    const float q = std::clamp(std::nearbyint(x[k] * inv), -127.f, 127.f);
    out[k] = static_cast<std::uint8_t>(static_cast<int>(q) + 128);
  }
}

float dot_bf16(const float* q, const std::uint16_t* kv, std::size_t n) {
  __m512 a = _mm512_setzero_ps();
  std::size_t d = 0;
  for (; d + 16 <= n; d += 16) {
    const __m512 k = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(kv + d))), 16));
    a = _mm512_fmadd_ps(_mm512_loadu_ps(q + d), k, a);
  }
  float s = _mm512_reduce_add_ps(a);
  for (; d < n; ++d) s += q[d] * kernels::cpu::from_bf16(kv[d]);
  return s;
}

void axpy_bf16(float w, const std::uint16_t* v, float* out, std::size_t n) {
  const __m512 a = _mm512_set1_ps(w);
  std::size_t d = 0;
  for (; d + 16 <= n; d += 16) {
    const __m512 x = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(v + d))), 16));
    _mm512_storeu_ps(out + d, _mm512_fmadd_ps(a, x, _mm512_loadu_ps(out + d)));
  }
  for (; d < n; ++d) out[d] += w * kernels::cpu::from_bf16(v[d]);
}

void axpy(float w, const float* v, float* out, std::size_t n) {
  const __m512 a = _mm512_set1_ps(w);
  std::size_t d = 0;
  for (; d + 16 <= n; d += 16) _mm512_storeu_ps(out + d, _mm512_fmadd_ps(a, _mm512_loadu_ps(v + d), _mm512_loadu_ps(out + d)));
  for (; d < n; ++d) out[d] += w * v[d];
}

// e^x for |x| < 88: 2^n * p(r), n = round(x / ln 2), r = x - n ln 2 (two-part ln 2), p
// the Taylor polynomial of degree 6 (|r| <= ln 2 / 2: relative error below 2e-7).
__m512 exp16(__m512 x) {
  x = _mm512_max_ps(_mm512_min_ps(x, _mm512_set1_ps(88.f)), _mm512_set1_ps(-87.f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187045e-06f), r);
  __m512 p = _mm512_set1_ps(1.f / 720);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f / 120));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f / 24));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f / 6));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f));
  return _mm512_scalef_ps(p, n);
}

void silu_mul(const float* g, const float* u, float* out, std::size_t n) {
  std::size_t i = 0;
  const __m512 one = _mm512_set1_ps(1.f);
  for (; i + 16 <= n; i += 16) {
    const __m512 x = _mm512_loadu_ps(g + i);
    __m512 s = _mm512_div_ps(x, _mm512_add_ps(one, exp16(_mm512_sub_ps(_mm512_setzero_ps(), x))));
    // Below -87, x e^x is under 1e-36: zero (e^-x would be clamped, not the quotient).
    s = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.f), _CMP_GE_OQ), s);
    _mm512_storeu_ps(out + i, _mm512_mul_ps(s, _mm512_loadu_ps(u + i)));
  }
  for (; i < n; ++i) out[i] = g[i] / (1.f + std::exp(-g[i])) * u[i];
}

}  // namespace avx512

#pragma GCC pop_options

}  // namespace

bool to_bf16_row(const float* x, std::size_t K, std::uint16_t* out) {
  if (!features().avx512_bf16) return false;
  avx512::to_bf16_row(x, K, out);
  return true;
}

bool quantize_row_u8(const float* x, std::size_t K, std::uint8_t* out, float& scale) {
  if (!features().avx512) return false;
  avx512::quantize_row_u8(x, K, out, scale);
  return true;
}

float dot_bf16(const float* q, const std::uint16_t* k, std::size_t n) {
  if (features().avx512) return avx512::dot_bf16(q, k, n);
  float s = 0;
  for (std::size_t d = 0; d < n; ++d) s += q[d] * from_bf16(k[d]);
  return s;
}

void axpy_bf16(float a, const std::uint16_t* v, float* out, std::size_t n) {
  if (features().avx512) return avx512::axpy_bf16(a, v, out, n);
  for (std::size_t d = 0; d < n; ++d) out[d] += a * from_bf16(v[d]);
}

void axpy(float a, const float* v, float* out, std::size_t n) {
  if (features().avx512) return avx512::axpy(a, v, out, n);
  for (std::size_t d = 0; d < n; ++d) out[d] += a * v[d];
}

void silu_mul(const float* g, const float* u, float* out, std::size_t n) {
  if (features().avx512) return avx512::silu_mul(g, u, out, n);
  reference::silu_mul(g, u, out, n);
}

bool gemm(const prepared_input& in, const qmatrix& w, const float* bias, std::size_t n0, std::size_t n1, float* y,
          std::size_t ldy) {
  const std::size_t T = in.T, Kp = in.Kp;
  switch (in.path) {
    case isa_path::avx2:
      switch (w.type) {
        case wtype::f32: avx2::rows_loop<4, 2>(avx2::f32{{in, w}}, T, Kp, bias, n0, n1, y, ldy); return true;
        case wtype::bf16: avx2::rows_loop<4, 2>(avx2::bf16{{in, w}}, T, Kp, bias, n0, n1, y, ldy); return true;
        case wtype::int8: avx2::rows_loop<4, 2>(avx2::int8{{in, w}}, T, Kp, bias, n0, n1, y, ldy); return true;
        case wtype::f16: avx2::rows_loop<4, 2>(avx2::f16{{in, w}}, T, Kp, bias, n0, n1, y, ldy); return true;
      }
      return false;
    case isa_path::avx_vnni:
      if (w.type != wtype::int8) return false;
      avx2::rows_loop<4, 2>(avx2::vnni_op{{in, w}}, T, Kp, bias, n0, n1, y, ldy);
      return true;
    case isa_path::avx512:
      switch (w.type) {
        case wtype::f32: avx512::rows_loop<4, 4>(avx512::f32{{in, w}}, T, Kp, bias, n0, n1, y, ldy); return true;
        case wtype::bf16: avx512::rows_loop<4, 4>(avx512::bf16{{in, w}}, T, Kp, bias, n0, n1, y, ldy); return true;
        case wtype::int8: avx512::rows_loop<4, 4>(avx512::int8{{in, w}}, T, Kp, bias, n0, n1, y, ldy); return true;
        case wtype::f16: avx512::rows_loop<4, 4>(avx512::f16{{in, w}}, T, Kp, bias, n0, n1, y, ldy); return true;
      }
      return false;
    case isa_path::avx512_bf16:
      if (w.type != wtype::bf16) return false;
      avx512::rows_loop<4, 4>(avx512::bf16_dot{in, w}, T, Kp, bias, n0, n1, y, ldy);
      return true;
    case isa_path::avx512_vnni:
      if (w.type != wtype::int8) return false;
      avx512::rows_loop<4, 4>(avx512::vnni{in, w}, T, Kp, bias, n0, n1, y, ldy);
      return true;
    case isa_path::scalar: return false;
  }
  return false;
}

}  // namespace kiln::kernels::cpu::simd

#else

#include "kernels/reference/ops.hpp"

namespace kiln::kernels::cpu::simd {

bool to_bf16_row(const float*, std::size_t, std::uint16_t*) { return false; }
bool quantize_row_u8(const float*, std::size_t, std::uint8_t*, float&) { return false; }
float dot_bf16(const float* q, const std::uint16_t* k, std::size_t n) {
  float s = 0;
  for (std::size_t d = 0; d < n; ++d) s += q[d] * from_bf16(k[d]);
  return s;
}
void axpy_bf16(float a, const std::uint16_t* v, float* out, std::size_t n) {
  for (std::size_t d = 0; d < n; ++d) out[d] += a * from_bf16(v[d]);
}
void axpy(float a, const float* v, float* out, std::size_t n) {
  for (std::size_t d = 0; d < n; ++d) out[d] += a * v[d];
}
void silu_mul(const float* g, const float* u, float* out, std::size_t n) { reference::silu_mul(g, u, out, n); }
bool gemm(const prepared_input&, const qmatrix&, const float*, std::size_t, std::size_t, float*, std::size_t) { return false; }

}  // namespace kiln::kernels::cpu::simd

#endif
