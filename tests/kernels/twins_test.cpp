// CPU twins of the small kernels and of sampling: the rules the GPU kernels must reproduce.
#include <doctest/doctest.h>

#include <cmath>
#include <map>
#include <vector>

#include "kernels/reference/elementwise.hpp"
#include "kernels/reference/sampling.hpp"

namespace ref = kiln::kernels::reference;

TEST_CASE("twins: embedding gather, KV append by slot, residual add") {
  const std::vector<float> table = {0, 1, 10, 11, 20, 21};  // vocab 3, dim 2
  const std::vector<std::int32_t> ids = {2, 0, 7};
  std::vector<float> out(6, -1);
  ref::embedding_gather(table.data(), 3, 2, ids.data(), 3, out.data());
  CHECK(out == std::vector<float>{20, 21, 0, 1, 0, 0});

  const std::vector<float> k = {1, 2, 3, 4}, v = {5, 6, 7, 8};  // T 2, row 2
  const std::vector<std::int32_t> slots = {3, -1};
  std::vector<float> kc(8, 0), vc(8, 0);
  ref::kv_append(k.data(), v.data(), slots.data(), 2, 2, kc.data(), vc.data());
  CHECK(kc == std::vector<float>{0, 0, 0, 0, 0, 0, 1, 2});
  CHECK(vc == std::vector<float>{0, 0, 0, 0, 0, 0, 5, 6});

  std::vector<float> x = {1, 2}, y = {0.5f, -2};
  ref::residual_add(x.data(), y.data(), 2);
  CHECK(x == std::vector<float>{1.5f, 0});
}

TEST_CASE("sampling twin: argmax, top-k with ties, top-p by tie groups, seeded draws") {
  const std::vector<float> l = {1, 3, 3, 0, 2};
  CHECK(ref::sample_row(l.data(), 5, {1, 0, 0.f}) == 1);  // greedy: lowest id on ties
  auto seen = [&](ref::sample_params p, int draws) {
    std::map<int, int> count;
    for (int i = 0; i < draws; ++i) {
      p.position = i;
      ++count[ref::sample_row(l.data(), 5, p)];
    }
    return count;
  };
  // top-k 2: the 2nd largest logit is 3, so exactly the tied pair is kept.
  auto k2 = seen({7, 0, 1.f, 2}, 300);
  CHECK(k2.size() == 2);
  CHECK(k2.count(1));
  CHECK(k2.count(2));
  // top-k 3: threshold 2 keeps three tokens.
  CHECK(seen({7, 0, 1.f, 3}, 300).size() == 3);
  // top-p small: the top tie group alone reaches it.
  CHECK(seen({7, 0, 1.f, 0, 0.1f}, 300).size() == 2);
  // Everything at high temperature.
  CHECK(seen({7, 0, 50.f}, 400).size() == 5);
  // The same seed and position draw the same token; the draw is uniform on [0, 1).
  CHECK(ref::sample_row(l.data(), 5, {9, 4, 1.f}) == ref::sample_row(l.data(), 5, {9, 4, 1.f}));
  double sum = 0;
  for (int i = 0; i < 10000; ++i) {
    const double u = ref::sample_uniform(3, i);
    CHECK(u >= 0);
    CHECK(u < 1);
    sum += u;
  }
  CHECK(sum / 10000 == doctest::Approx(0.5).epsilon(0.02));
}

#include "kernels/reference/quant.hpp"

TEST_CASE("twins: INT8 per-row quantisation stays within half a step of the weights") {
  std::vector<float> w = {0.5f, -1.f, 0.25f, 0.f, 0.f, 0.f, 3.f, 2.9f, -0.01f};  // rows of 3; one all zero
  std::vector<std::int8_t> q(w.size());
  std::vector<float> scales(3), back(w.size());
  ref::quantize_rows_int8(w.data(), 3, 3, q.data(), scales.data());
  CHECK(scales[0] == doctest::Approx(1.f / 127));
  CHECK(scales[1] == 1.f);
  CHECK(q[1] == -127);
  CHECK(q[6] == 127);
  ref::dequantize_rows_int8(q.data(), scales.data(), 3, 3, back.data());
  for (std::size_t i = 0; i < w.size(); ++i) CHECK(std::fabs(back[i] - w[i]) <= scales[i / 3] / 2 + 1e-7f);
}
