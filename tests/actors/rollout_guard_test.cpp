// The canary split and the rollout guards as tables.
#include <doctest/doctest.h>

#include <cmath>
#include <random>
#include <string>

#include "actors/rollout_guard.hpp"

using namespace kiln::actors;
using kiln::config::model_route;
using kiln::config::rollout_config;

TEST_CASE("canary split: a conversation keeps its version; the share is near the percentage") {
  for (double pct : {1.0, 10.0, 50.0}) {
    model_route r{"m", "v1", "v2", pct, "", 0, "", 0};
    int canary = 0;
    const int n = 20000;
    for (int i = 0; i < n; ++i) {
      const std::string key = "conv-" + std::to_string(i);
      const std::string& v = version_for(r, key);
      for (int again = 0; again < 3; ++again) REQUIRE(version_for(r, key) == v);  // every turn the same
      canary += v == "v2";
    }
    // Binomial: within 4 standard deviations of n * p.
    const double p = pct / 100, sd = std::sqrt(n * p * (1 - p));
    CHECK(std::abs(canary - n * p) < 4 * sd);
  }
  model_route r{"m", "v1", "v2", 10, "", 0, "", 0};
  // Raising the percentage only moves conversations onto the canary, never off it.
  model_route wider = r;
  wider.canary_percent = 50;
  for (int i = 0; i < 5000; ++i) {
    const std::string key = "c" + std::to_string(i);
    if (version_for(r, key) == "v2") CHECK(version_for(wider, key) == "v2");
  }
  r.canary_percent = 0;
  CHECK(version_for(r, "any") == "v1");
  r.canary_percent = 100;
  CHECK(version_for(r, "any") == "v2");
  r.canary.clear();
  CHECK(version_for(r, "any") == "v1");
}

TEST_CASE("rollout guards: each margin, exactly at it and past it") {
  rollout_config lim;
  lim.guard_min_requests = 100;
  const window_stats live{1000, 0.010, 0.200, 300};
  struct row {
    const char* what;
    window_stats cand;
    bool breach;
  };
  const row rows[] = {
      {"same", {1000, 0.010, 0.200, 300}, false},
      {"errors +0.5 points: at the margin", {1000, 0.015, 0.200, 300}, false},
      {"errors +0.6 points", {1000, 0.016, 0.200, 300}, true},
      {"errors +2 points", {1000, 0.030, 0.200, 300}, true},
      {"fewer errors", {1000, 0.0, 0.200, 300}, false},
      {"p95 TTFT +20%: at the margin", {1000, 0.010, 0.2399, 300}, false},
      {"p95 TTFT +21%", {1000, 0.010, 0.242, 300}, true},
      {"p95 TTFT 40% slower", {1000, 0.010, 0.280, 300}, true},
      {"p95 TTFT faster", {1000, 0.010, 0.100, 300}, false},
      {"output +15%: at the margin", {1000, 0.010, 0.200, 344.9}, false},
      {"output +16%", {1000, 0.010, 0.200, 348}, true},
      {"output 30% longer", {1000, 0.010, 0.200, 390}, true},
      {"output 16% shorter", {1000, 0.010, 0.200, 252}, true},
      {"too few canary requests", {99, 0.5, 9.0, 900}, false},
  };
  for (const auto& r : rows) {
    CAPTURE(r.what);
    CHECK(guard_breach(live, r.cand, lim).has_value() == r.breach);
  }
  // Too few on the live side: no decision either.
  CHECK_FALSE(guard_breach({50, 0, 0.2, 300}, {1000, 0.5, 0.2, 300}, lim).has_value());
  // Combinations: every margin passed is named, the error rate first.
  auto why = guard_breach(live, {1000, 0.05, 0.5, 600}, lim);
  REQUIRE(why);
  CHECK(why->find("error rate") == 0);
  CHECK(why->find("p95 TTFT") != std::string::npos);
  CHECK(why->find("mean output") != std::string::npos);
  why = guard_breach(live, {1000, 0.010, 0.200, 390}, lim);
  REQUIRE(why);
  CHECK(why->find("mean output 390.0 tokens vs 300.0 live (+30%") == 0);
}

TEST_CASE("outcome window: trims to the window; p95, error rate and mean output") {
  outcome_window w;
  for (int i = 0; i < 100; ++i) w.add({static_cast<double>(i), i % 10 == 0, i < 95 ? 0.1 : 1.0, 10 + i % 3, i % 10 != 0});
  auto s = w.stats();
  CHECK(s.requests == 100);
  CHECK(s.error_rate == doctest::Approx(0.10));
  CHECK(s.ttft_p95_s == doctest::Approx(0.1));  // the 95th of 100 by nearest rank
  w.trim(99, 49.5);  // keeps at >= 49.5: 50..99
  s = w.stats();
  CHECK(s.requests == 50);
  CHECK(s.ttft_p95_s == doctest::Approx(1.0));
}

TEST_CASE("rollout guards act on evidence: noise past a margin is not a rollback, a real shift is") {
  rollout_config lim;
  lim.guard_min_requests = 100;
  std::mt19937_64 rng(7);
  std::lognormal_distribution<double> ttft(std::log(0.2), 0.35);
  std::uniform_int_distribution<int> out(200, 400);
  auto fill = [&](outcome_window& w, int n, double ttft_scale, double out_scale, double fail) {
    std::uniform_real_distribution<double> u(0, 1);
    for (int i = 0; i < n; ++i) {
      const bool failed = u(rng) < fail;
      w.add({0, failed, ttft(rng) * ttft_scale, static_cast<std::int32_t>(out(rng) * out_scale), !failed});
    }
  };
  // The same distributions, 200 candidate requests: over many draws the point p95 passes +20%
  // now and then, the evidence never does.
  int point_breaches = 0, confirmed = 0;
  for (int trial = 0; trial < 200; ++trial) {
    outcome_window live, cand;
    fill(live, 1800, 1, 1, 0.01);
    fill(cand, 200, 1, 1, 0.01);
    point_breaches += guard_breach(live.stats(), cand.stats(), lim).has_value();
    confirmed += confirmed_breach(live, cand, lim).has_value();
  }
  CHECK(point_breaches > 0);
  CHECK(confirmed == 0);
  // Real shifts, each found and named.
  struct shift {
    double ttft, out, fail;
    const char* named;
  };
  for (const shift& s : {shift{1.4, 1, 0.01, "p95 TTFT"}, shift{1, 1.3, 0.01, "mean output"}, shift{1, 1, 0.05, "error rate"}}) {
    CAPTURE(s.named);
    outcome_window live, cand;
    fill(live, 1800, 1, 1, 0.01);
    fill(cand, 400, s.ttft, s.out, s.fail);
    auto why = confirmed_breach(live, cand, lim);
    REQUIRE(why);
    CHECK(why->find(s.named) != std::string::npos);
  }
}
