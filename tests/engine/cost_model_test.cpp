// The cost model reproduces the sizing seed's worked example (seed 001, sections 4 and 5).
#include <doctest/doctest.h>

#include "engine/cost_model.hpp"

using namespace kiln::engine;

namespace {

// A1-A7 of seed 001: 70B, 80 layers, d_model 8192, 64 heads, 8 KV heads, TP 8 on a 5.3 TB/s,
// 1300 TFLOP/s part.
cost_model seed_70b() {
  model_shape m;
  m.layers = 80;
  m.d_model = 8192;
  m.heads = 64;
  m.kv_heads = 8;
  m.head_dim = 128;
  m.params = 70e9;
  gpu_assumptions g;
  g.hbm_bytes_per_s = 5.3e12;
  g.flops_per_s = 1300e12;
  g.bandwidth_efficiency = 0.70;
  g.flops_efficiency = 0.40;
  g.end_to_end_efficiency = 0.60;
  g.allreduce_bytes_per_s = 300e9;
  g.allreduce_latency_s = 8e-6;
  g.fixed_step_s = 1.5e-3;
  g.tensor_parallel = 8;
  return cost_model(m, g);
}

}  // namespace

TEST_CASE("cost model: seed 001 decode step at batch 192, context 2,048") {
  const cost_model c = seed_70b();
  CHECK(c.kv_bytes_per_token() == doctest::Approx(327680));
  step_shape s;
  s.new_tokens = 192;
  s.kv_tokens_read = 192LL * 2048;
  const step_time t = c.time(s);
  CHECK(t.memory * 1e3 == doctest::Approx(9.06).epsilon(0.005));
  CHECK(t.compute * 1e3 == doctest::Approx(6.46).epsilon(0.005));
  CHECK(t.allreduce * 1e3 == doctest::Approx(4.22).epsilon(0.005));
  CHECK(t.roofline * 1e3 == doctest::Approx(14.77).epsilon(0.005));
  CHECK(t.total * 1e3 == doctest::Approx(24.62).epsilon(0.005));
}

TEST_CASE("cost model: seed 001 prefill FLOPs and time") {
  const cost_model c = seed_70b();
  CHECK(c.attention_flops(2048, 0) == doctest::Approx(11.0e12).epsilon(0.005));
  CHECK(c.attention_flops(32768, 0) == doctest::Approx(2814.7e12).epsilon(0.005));
  // 2,048-token prompt: (286.7 + 11.0) TFLOP at 40% of 8 x 1300 TFLOP/s, over 60% = 119 ms.
  step_shape s;
  s.new_tokens = 2048;
  s.attention_flops = c.attention_flops(2048, 0);
  const step_time t = c.time(s);
  CHECK(t.compute / c.gpu().end_to_end_efficiency * 1e3 == doctest::Approx(119).epsilon(0.01));
}

TEST_CASE("cost model: the default 7B GQA shape on an H200") {
  const cost_model c({}, {});
  CHECK(c.kv_bytes_per_token() == doctest::Approx(131072));  // seed 000: 2 x 32 x 8 x 128 x 2
  CHECK(c.params() == doctest::Approx(7.24e9).epsilon(0.01));
  CHECK(c.weight_bytes() == doctest::Approx(14.5e9).epsilon(0.01));
  // Single-stream decode is bandwidth bound: weights over 70% of 4.8 TB/s.
  step_shape one;
  one.new_tokens = 1;
  one.kv_tokens_read = 1000;
  const step_time t = c.time(one);
  CHECK(t.memory > t.compute);
  CHECK(t.allreduce == 0);
  CHECK(t.memory == doctest::Approx((c.weight_bytes() + 1000 * 131072.0) / (4.8e12 * 0.7)));
  // More KV read costs more time; the batch amortises the weight read.
  step_shape batch = one;
  batch.new_tokens = 64;
  batch.kv_tokens_read = 64 * 1000;
  CHECK(c.time(batch).total > t.total);
  CHECK(c.time(batch).total / 64 < t.total);
}

TEST_CASE("cost model: the roofline's knee: up to memory_bound_tokens a step costs no more than one token") {
  // BF16 weights on the default H200: 2 bytes x (0.40 x 989 TFLOP/s) / (2 x 0.70 x 4.8 TB/s) = 117.7.
  const cost_model c({}, {});
  CHECK(c.memory_bound_tokens() == 117);
  const auto with_tokens = [&](std::int64_t n) {
    step_shape s;
    s.new_tokens = n;
    return c.time(s);
  };
  CHECK(with_tokens(117).total == with_tokens(1).total);
  CHECK(with_tokens(118).total > with_tokens(1).total);
  // Tensor parallelism splits weights and FLOPs alike: the same knee; FP8 weights halve it.
  CHECK(seed_70b().memory_bound_tokens() == static_cast<int>(2 * 1300e12 * 0.40 / (2 * 5.3e12 * 0.70)));
  model_shape fp8;
  fp8.dtype_bytes = 1;
  CHECK(cost_model(fp8, {}).memory_bound_tokens() == 58);
}

TEST_CASE("cost model: a stretch of decode steps costs what each step alone would, to the bit") {
  // TP 8 (all-reduce in every step) and a single GPU; batches where memory or compute binds.
  const cost_model one_gpu(model_shape{}, gpu_assumptions{});
  const cost_model big = seed_70b();
  for (const cost_model& m : {big, one_gpu}) {
    for (const std::int64_t batch : {1, 7, 192, 4096}) {
      std::vector<double> totals{42.0};  // written over
      m.decode_totals(batch, 3000, 50, totals);
      REQUIRE(totals.size() == 50);
      for (int k = 1; k <= 50; ++k) {
        step_shape s;
        s.new_tokens = batch;
        s.kv_tokens_read = 3000 + batch * k;
        CHECK(totals[static_cast<std::size_t>(k - 1)] == m.time(s).total);  // exact, not near
      }
      CHECK(totals.back() >= totals.front());
    }
  }
  std::vector<double> none{1.0};
  big.decode_totals(8, 100, 0, none);
  CHECK(none.empty());
}
