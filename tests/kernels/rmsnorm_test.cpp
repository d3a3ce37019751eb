// RMSNorm: the CPU twin against a hand-checked case, and the GPU kernel against the twin.
#include <doctest/doctest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/reference/rmsnorm.hpp"
#if KILN_HAVE_CUDA
#include <cuda_runtime.h>
#include "kernels/rmsnorm.hpp"
#endif

using kiln::kernels::reference::rmsnorm;

TEST_CASE("rmsnorm twin: hand-checked rows") {
  // Row [3, 4]: mean square 12.5, scale 1/sqrt(12.5).
  const std::vector<float> x = {3, 4, 1, 1};
  const std::vector<float> w = {1, 2};
  std::vector<float> out(4);
  rmsnorm(x.data(), w.data(), out.data(), 2, 2, 0.f);
  const float s = 1.f / std::sqrt(12.5f);
  CHECK(out[0] == doctest::Approx(3 * s));
  CHECK(out[1] == doctest::Approx(8 * s));
  CHECK(out[2] == doctest::Approx(1.f));
  CHECK(out[3] == doctest::Approx(2.f));
  // eps keeps a zero row finite.
  std::vector<float> zero(2, 0.f), z(2);
  rmsnorm(zero.data(), w.data(), z.data(), 1, 2, 1e-6f);
  CHECK(z[0] == 0.f);
}

TEST_CASE("rmsnorm twin: output rows have unit RMS before the weight") {
  std::mt19937 rng(1);
  std::normal_distribution<float> d(0, 3);
  const std::size_t rows = 5, dim = 257;
  std::vector<float> x(rows * dim), w(dim, 1.f), out(rows * dim);
  for (auto& v : x) v = d(rng);
  rmsnorm(x.data(), w.data(), out.data(), rows, dim, 1e-6f);
  for (std::size_t r = 0; r < rows; ++r) {
    double ss = 0;
    for (std::size_t i = 0; i < dim; ++i) ss += out[r * dim + i] * out[r * dim + i];
    CHECK(std::sqrt(ss / dim) == doctest::Approx(1.0).epsilon(1e-4));
  }
}

TEST_CASE("rmsnorm GPU kernel matches its CPU twin") {
#if KILN_HAVE_CUDA
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    MESSAGE("skipped: no CUDA device on this machine");
    return;
  }
  std::mt19937 rng(2);
  std::normal_distribution<float> d(0, 1);
  const std::size_t rows = 37, dim = 4096;
  std::vector<float> x(rows * dim), w(dim), want(rows * dim), got(rows * dim);
  for (auto& v : x) v = d(rng);
  for (auto& v : w) v = d(rng);
  rmsnorm(x.data(), w.data(), want.data(), rows, dim, 1e-5f);
  float *dx, *dw, *dout;
  REQUIRE(cudaMalloc(&dx, x.size() * 4) == cudaSuccess);
  REQUIRE(cudaMalloc(&dw, w.size() * 4) == cudaSuccess);
  REQUIRE(cudaMalloc(&dout, got.size() * 4) == cudaSuccess);
  REQUIRE(cudaMemcpy(dx, x.data(), x.size() * 4, cudaMemcpyHostToDevice) == cudaSuccess);
  REQUIRE(cudaMemcpy(dw, w.data(), w.size() * 4, cudaMemcpyHostToDevice) == cudaSuccess);
  REQUIRE(kiln::kernels::launch_rmsnorm(dx, dw, dout, rows, dim, 1e-5f, nullptr) == cudaSuccess);
  REQUIRE(cudaMemcpy(got.data(), dout, got.size() * 4, cudaMemcpyDeviceToHost) == cudaSuccess);
  cudaFree(dx);
  cudaFree(dw);
  cudaFree(dout);
  double err = 0, norm = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    err += (got[i] - want[i]) * (got[i] - want[i]);
    norm += want[i] * want[i];
  }
  CHECK(std::sqrt(err / norm) < 1e-5);  // fp32: relative-norm error bound
#else
  MESSAGE("skipped: kiln was built without CUDA (no nvcc)");
#endif
}
