#include "kernels/reference/ops.hpp"

#include <algorithm>
#include <cmath>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace kiln::kernels::reference {

namespace {

float dot_portable(const float* a, const float* b, std::size_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int l = 0; l < 8; ++l) acc[l] += a[i + l] * b[i + l];
  float s = 0;
  for (; i < n; ++i) s += a[i] * b[i];
  return s + ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

#if defined(__x86_64__)
__attribute__((target("avx2,fma"))) float dot_avx2(const float* a, const float* b, std::size_t n) {
  __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps(), s2 = _mm256_setzero_ps(), s3 = _mm256_setzero_ps();
  std::size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
    s2 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 16), _mm256_loadu_ps(b + i + 16), s2);
    s3 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 24), _mm256_loadu_ps(b + i + 24), s3);
  }
  for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
  const __m256 s = _mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3));
  __m128 h = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
  h = _mm_add_ps(h, _mm_movehl_ps(h, h));
  h = _mm_add_ss(h, _mm_shuffle_ps(h, h, 1));
  float out = _mm_cvtss_f32(h);
  for (; i < n; ++i) out += a[i] * b[i];
  return out;
}

// Four dot products against one weight row: each weight load feeds four FMAs.
__attribute__((target("avx2,fma"))) void dot4_avx2(const float* x0, const float* x1, const float* x2, const float* x3,
                                                   const float* w, std::size_t n, float* out) {
  __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps(), s2 = _mm256_setzero_ps(), s3 = _mm256_setzero_ps();
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 wv = _mm256_loadu_ps(w + i);
    s0 = _mm256_fmadd_ps(_mm256_loadu_ps(x0 + i), wv, s0);
    s1 = _mm256_fmadd_ps(_mm256_loadu_ps(x1 + i), wv, s1);
    s2 = _mm256_fmadd_ps(_mm256_loadu_ps(x2 + i), wv, s2);
    s3 = _mm256_fmadd_ps(_mm256_loadu_ps(x3 + i), wv, s3);
  }
  const __m256 sums[4] = {s0, s1, s2, s3};
  const float* xs[4] = {x0, x1, x2, x3};
  for (int r = 0; r < 4; ++r) {
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(sums[r]), _mm256_extractf128_ps(sums[r], 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_shuffle_ps(h, h, 1));
    float v = _mm_cvtss_f32(h);
    for (std::size_t k = i; k < n; ++k) v += xs[r][k] * w[k];
    out[r] = v;
  }
}

const bool kHaveAvx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#endif

}  // namespace

float dot(const float* a, const float* b, std::size_t n) {
#if defined(__x86_64__)
  if (kHaveAvx2) return dot_avx2(a, b, n);
#endif
  return dot_portable(a, b, n);
}

void matmul_xwt(const float* x, std::size_t T, std::size_t K, const float* w, const float* bias, std::size_t N,
                std::size_t n_begin, std::size_t n_end, float* y) {
  // Each weight row is read once and used for every token row while it is in cache.
  for (std::size_t n = n_begin; n < n_end; ++n) {
    const float* wr = w + n * K;
    const float b = bias ? bias[n] : 0.f;
    std::size_t t = 0;
#if defined(__x86_64__)
    if (kHaveAvx2) {
      float out[4];
      for (; t + 4 <= T; t += 4) {
        dot4_avx2(x + t * K, x + (t + 1) * K, x + (t + 2) * K, x + (t + 3) * K, wr, K, out);
        for (int r = 0; r < 4; ++r) y[(t + static_cast<std::size_t>(r)) * N + n] = out[r] + b;
      }
    }
#endif
    for (; t < T; ++t) y[t * N + n] = dot(x + t * K, wr, K) + b;
  }
}

void rope_inv_freq(std::size_t head_dim, double theta, double llama3_factor, double low_freq_factor,
                   double high_freq_factor, double original_max_position, float* inv_freq) {
  const double pi = 3.14159265358979323846;
  for (std::size_t i = 0; i < head_dim / 2; ++i) {
    double f = 1.0 / std::pow(theta, static_cast<double>(2 * i) / static_cast<double>(head_dim));
    if (llama3_factor > 0) {
      const double low_wavelen = original_max_position / low_freq_factor;
      const double high_wavelen = original_max_position / high_freq_factor;
      const double wavelen = 2 * pi / f;
      if (wavelen > low_wavelen) {
        f /= llama3_factor;
      } else if (wavelen >= high_wavelen) {
        const double smooth = (original_max_position / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor);
        f = (1 - smooth) * f / llama3_factor + smooth * f;
      }
    }
    inv_freq[i] = static_cast<float>(f);
  }
}

void rope(float* x, std::size_t heads, std::size_t head_dim, std::int64_t position, const float* inv_freq) {
  const std::size_t half = head_dim / 2;
  for (std::size_t i = 0; i < half; ++i) {
    const double angle = static_cast<double>(position) * inv_freq[i];
    const float c = static_cast<float>(std::cos(angle)), s = static_cast<float>(std::sin(angle));
    for (std::size_t h = 0; h < heads; ++h) {
      float* xh = x + h * head_dim;
      const float a = xh[i], b = xh[i + half];
      xh[i] = a * c - b * s;
      xh[i + half] = b * c + a * s;
    }
  }
}

void silu_mul(const float* gate, const float* up, float* out, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) out[i] = gate[i] / (1.f + std::exp(-gate[i])) * up[i];
}

void paged_attention_row(const float* q, const paged_kv_layer& kv, const std::int32_t* block_table,
                         std::size_t context, std::size_t heads, float scale, float* out, float* scratch) {
  const std::size_t hd = kv.head_dim, group = heads / kv.kv_heads;
  for (std::size_t h = 0; h < heads; ++h) {
    const std::size_t kvh = h / group;
    const float* qh = q + h * hd;
    float max_score = -INFINITY;
    for (std::size_t p = 0; p < context; ++p) {
      const float* k = kv.k_at(block_table[p / kv.block_size], p % kv.block_size) + kvh * hd;
      scratch[p] = dot(qh, k, hd) * scale;
      max_score = std::max(max_score, scratch[p]);
    }
    float denom = 0;
    for (std::size_t p = 0; p < context; ++p) {
      scratch[p] = std::exp(scratch[p] - max_score);
      denom += scratch[p];
    }
    float* oh = out + h * hd;
    std::fill(oh, oh + hd, 0.f);
    for (std::size_t p = 0; p < context; ++p) {
      const float wgt = scratch[p] / denom;
      const float* v = kv.v_at(block_table[p / kv.block_size], p % kv.block_size) + kvh * hd;
      for (std::size_t d = 0; d < hd; ++d) oh[d] += wgt * v[d];
    }
  }
}

}  // namespace kiln::kernels::reference
