// The CPU matrix kernels in the weights' own precision against an F64 reference, for every
// dtype and every instruction-set path the CPU running the tests has (scalar always), with
// the tolerance each path states; rows give the same bits alone or in any batch.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "kernels/cpu/qmatrix.hpp"
#include "kernels/cpu/qmatrix_simd.hpp"
#include "kernels/reference/ops.hpp"

#include <algorithm>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

using namespace kiln::kernels::cpu;

namespace {

std::vector<float> randn(std::mt19937& rng, std::size_t n, float scale = 1.f) {
  std::normal_distribution<float> d(0.f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// The tolerance a path states for one output: F32 arithmetic on the stored weights; BF16
// activations add 2^-8 of sum |x w|; 8-bit activations half a step (amax / 254) per |w|.
double tolerance(isa_path p, const float* x, const std::vector<float>& row, std::size_t K) {
  double xw = 0, w_abs = 0, amax = 0;
  for (std::size_t k = 0; k < K; ++k) {
    xw += std::fabs(static_cast<double>(x[k]) * row[k]);
    w_abs += std::fabs(row[k]);
    amax = std::max(amax, static_cast<double>(std::fabs(x[k])));
  }
  if (p == isa_path::avx512_bf16) return 4e-3 * xw + 1e-6;
  if (p == isa_path::avx512_vnni || p == isa_path::avx_vnni) return 1.01 * w_abs * amax / 254 + 1e-4 * xw + 1e-6;
  return 2e-5 * xw + 1e-6;
}

}  // namespace

TEST_CASE("cpu kernels: every dtype on every path this CPU has, against F64, alone and in batches") {
  std::mt19937 rng(11);
  MESSAGE("cpu features: " << features().summary());
  for (wtype t : {wtype::f32, wtype::bf16, wtype::int8, wtype::f16}) {
    for (const auto& [N, K] : {std::pair<std::size_t, std::size_t>{37, 200}, {64, 128}, {5, 1}, {130, 384}}) {
      const auto w = randn(rng, N * K, 0.05f);
      std::vector<float> bias = randn(rng, N);
      const qmatrix m = qmatrix::from_f32(w.data(), N, K, t);
      CHECK(m.Kp % 128 == 0);
      CHECK(m.Kp >= K);
      std::vector<std::vector<float>> rows(N, std::vector<float>(K));
      for (std::size_t n = 0; n < N; ++n) m.row(n, rows[n].data());
      for (isa_path p : paths_for(t)) {
        CAPTURE(to_string(t));
        CAPTURE(to_string(p));
        CAPTURE(K);
        const std::size_t T = 16;
        auto x = randn(rng, T * K);
        x[3] = 40.f;  // an outlier in the first row
        prepared_input in;
        prepare(x.data(), T, K, t, p, in);
        std::vector<float> y(T * N + 8, -1.f);
        // In three uneven slices of the outputs, as the thread pool splits them.
        gemm(in, m, bias.data(), 0, N / 3, y.data(), N);
        gemm(in, m, bias.data(), N / 3, N / 2, y.data(), N);
        gemm(in, m, bias.data(), N / 2, N, y.data(), N);
        double worst = 0;
        for (std::size_t r = 0; r < T; ++r) {
          for (std::size_t n = 0; n < N; ++n) {
            double want = bias[n];
            for (std::size_t k = 0; k < K; ++k) want += static_cast<double>(x[r * K + k]) * rows[n][k];
            const double err = std::fabs(y[r * N + n] - want);
            const double tol = tolerance(p, &x[r * K], rows[n], K);
            worst = std::max(worst, err / tol);
            if (err > tol) FAIL_CHECK("row " << r << " out " << n << ": " << y[r * N + n] << " vs " << want);
          }
        }
        // Each row alone: the same bits as inside the batch of 16.
        for (std::size_t r : {0u, 5u, 15u}) {
          prepared_input one;
          prepare(&x[r * K], 1, K, t, p, one);
          std::vector<float> y1(N + 8, 12345.f);
          gemm(one, m, bias.data(), 0, N - N / 2, y1.data(), N);
          gemm(one, m, bias.data(), N - N / 2, N, y1.data(), N);
          CHECK(std::memcmp(y1.data(), &y[r * N], N * sizeof(float)) == 0);
          for (std::size_t i = N; i < N + 8; ++i) CHECK(y1[i] == 12345.f);  // nothing written past the outputs
        }
        CHECK(worst <= 1.0);
        for (std::size_t i = T * N; i < T * N + 8; ++i) CHECK(y[i] == -1.f);
      }
    }
  }
}

TEST_CASE("cpu kernels: BF16 rounds to nearest even, INT8 rows scale to 127, bytes count the stored dtype") {
  CHECK(to_bf16(1.0f) == 0x3f80);
  CHECK(from_bf16(to_bf16(1.0f + 1.0f / 256)) == 1.0f);            // a tie: to the even mantissa
  CHECK(from_bf16(to_bf16(1.0f + 3.0f / 256)) == 1.0f + 4.0f / 256);  // a tie the other way
  CHECK(from_bf16(to_bf16(-2.5f)) == -2.5f);
  CHECK(std::isnan(from_bf16(to_bf16(std::nanf("")))));
  CHECK(std::isinf(from_bf16(to_bf16(INFINITY))));
  const std::vector<float> w{0.5f, -1.f, 0.25f, 0.f, 0.f, 0.f};
  const qmatrix q = qmatrix::from_f32(w.data(), 2, 3, wtype::int8);
  CHECK(q.q[0] == 64);
  CHECK(q.q[1] == -127);
  CHECK(q.scale[0] == doctest::Approx(1.f / 127));
  CHECK(q.scale[1] == 1.f);  // a zero row
  CHECK(q.qsum[0] == 64 - 127 + 32);
  CHECK(q.bytes() == 2 * 3 + 2 * 4);
  CHECK(qmatrix::from_f32(w.data(), 2, 3, wtype::bf16).bytes() == 12);
  CHECK(qmatrix::from_f32(w.data(), 2, 3, wtype::f32).bytes() == 24);
  wtype t;
  CHECK(parse_wtype("bf16", t));
  CHECK(t == wtype::bf16);
  CHECK_FALSE(parse_wtype("fp8", t));
  prepared_input wrong;
  prepare(w.data(), 1, 3, wtype::bf16, isa_path::scalar, wrong);
  std::vector<float> y(2);
  CHECK_THROWS(gemm(wrong, q, nullptr, 0, 2, y.data(), 2));  // prepared for another dtype
}

#if defined(__x86_64__)
__attribute__((target("f16c"))) std::uint16_t hardware_f16(float x) {
  return static_cast<std::uint16_t>(_cvtss_sh(x, _MM_FROUND_TO_NEAREST_INT));
}
__attribute__((target("f16c"))) float hardware_from_f16(std::uint16_t h) { return _cvtsh_ss(h); }
#endif

TEST_CASE("cpu kernels: F16 conversions round to nearest even, as F16C does, subnormals and infinities included") {
  CHECK(to_f16(1.0f) == 0x3c00);
  CHECK(to_f16(-2.0f) == 0xc000);
  CHECK(to_f16(65504.f) == 0x7bff);
  CHECK(to_f16(65520.f) == 0x7c00);  // halfway to the next: rounds up to infinity
  CHECK(to_f16(0x1p-24f) == 0x0001);
  CHECK(to_f16(0x1p-25f) == 0x0000);  // a tie to even: zero
  CHECK(from_f16(0x0001) == 0x1p-24f);
  CHECK(std::isnan(from_f16(to_f16(std::nanf("")))));
#if defined(__x86_64__)
  if (!__builtin_cpu_supports("f16c")) return;
  std::mt19937 rng(9);
  for (int i = 0; i < 200000; ++i) {
    std::uint32_t u = static_cast<std::uint32_t>(rng());
    if (i % 2) u = (u & 0x807fffffu) | ((100u + u % 60u) << 23);  // mostly within half's range
    float x;
    std::memcpy(&x, &u, 4);
    if (std::isnan(x)) continue;
    CAPTURE(x);
    REQUIRE(to_f16(x) == hardware_f16(x));
    const auto h = static_cast<std::uint16_t>(u & 0xffffu);
    if (((h >> 10) & 0x1f) != 0x1f) REQUIRE(from_f16(h) == hardware_from_f16(h));
  }
#endif
}

TEST_CASE("cpu kernels: the vector helpers equal their scalar forms (rounding, quantising) or the reference (SiLU)") {
  namespace simd = kiln::kernels::cpu::simd;
  std::mt19937 rng(5);
  for (std::size_t K : {1u, 15u, 16u, 33u, 200u, 768u}) {
    CAPTURE(K);
    auto x = randn(rng, K, 3.f);
    if (K > 3) x[2] = -0.f;
    // BF16 rounding: bit for bit the scalar's.
    std::vector<std::uint16_t> b(K);
    if (simd::to_bf16_row(x.data(), K, b.data()))
      for (std::size_t k = 0; k < K; ++k) CHECK(b[k] == to_bf16(x[k]));
    // 8-bit quantisation: the scalar's scale and codes.
    std::vector<std::uint8_t> u(K);
    float scale = 0;
    if (simd::quantize_row_u8(x.data(), K, u.data(), scale)) {
      float amax = 0;
      for (float v : x) amax = std::max(amax, std::fabs(v));
      CHECK(scale == amax / 127.f);
      for (std::size_t k = 0; k < K; ++k)
        CHECK(static_cast<int>(u[k]) == static_cast<int>(std::clamp(std::nearbyint(x[k] * (1.f / scale)), -127.f, 127.f)) + 128);
    }
    // Dot and axpy with a BF16 operand, against F64.
    std::vector<std::uint16_t> kb(K);
    for (std::size_t k = 0; k < K; ++k) kb[k] = to_bf16(x[(k * 7) % K]);
    double want = 0, mag = 0;
    for (std::size_t k = 0; k < K; ++k) {
      want += static_cast<double>(x[k]) * from_bf16(kb[k]);
      mag += std::fabs(static_cast<double>(x[k]) * from_bf16(kb[k]));
    }
    CHECK(std::fabs(simd::dot_bf16(x.data(), kb.data(), K) - want) <= 1e-5 * mag + 1e-6);
    std::vector<float> out(K, 1.f), out32(K, 1.f);
    simd::axpy_bf16(0.5f, kb.data(), out.data(), K);
    std::vector<float> wide(K);
    for (std::size_t k = 0; k < K; ++k) wide[k] = from_bf16(kb[k]);
    simd::axpy(0.5f, wide.data(), out32.data(), K);
    for (std::size_t k = 0; k < K; ++k) {
      CHECK(out[k] == doctest::Approx(1.0 + 0.5 * wide[k]).epsilon(1e-6));
      CHECK(out32[k] == out[k]);
    }
  }
  // SiLU times up: relative 1e-6 of the reference over the whole useful range, and the ends.
  std::vector<float> g, up;
  for (float v = -100.f; v <= 100.f; v += 0.0371f) g.push_back(v);
  for (float v : {-1e30f, -88.f, -87.5f, 87.5f, 88.f, 1e30f, 0.f, -0.f, 1e-30f}) g.push_back(v);
  up.assign(g.size(), 1.5f);
  std::vector<float> got(g.size()), ref(g.size());
  simd::silu_mul(g.data(), up.data(), got.data(), g.size());
  kiln::kernels::reference::silu_mul(g.data(), up.data(), ref.data(), g.size());
  for (std::size_t i = 0; i < g.size(); ++i) {
    CAPTURE(g[i]);
    CHECK(std::isfinite(got[i]));
    CHECK(std::fabs(got[i] - ref[i]) <= 1e-6 * std::fabs(ref[i]) + 1e-30);
  }
}
