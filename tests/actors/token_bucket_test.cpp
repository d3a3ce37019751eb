// The token bucket as tables, plus its two promises: over any window, what it admits (net of
// refunds) is at most rate x window + burst; and a client that waits out Retry-After fits.
#include <doctest/doctest.h>

#include <chrono>
#include <random>
#include <vector>

#include "actors/token_bucket.hpp"

using kiln::actors::token_bucket;
using namespace std::chrono_literals;
using tp = token_bucket::time_point;

TEST_CASE("token bucket: charges, refusals, Retry-After and refunds, step by step") {
  const tp t0{};
  token_bucket b(600, 100, t0);  // 10 tokens a second, up to 100
  struct row {
    std::chrono::milliseconds at;
    const char* op;  // charge | refund
    std::int64_t n;
    bool ok;                      // charge: admitted
    std::int64_t remaining_after;
    std::int64_t retry_after_1;   // whole seconds until 1 token fits, after the op
  };
  const row table[] = {
      {0ms, "charge", 100, true, 0, 1},     // exactly the burst
      {0ms, "charge", 1, false, 0, 1},      // one past it
      {100ms, "charge", 1, true, 0, 1},     // 0.1 s later one token is back
      {5100ms, "charge", 51, false, 50, 0}, // 5 s later 50 are there
      {5100ms, "charge", 50, true, 0, 1},
      {5100ms, "refund", 30, true, 30, 0},  // unused output given back
      {5100ms, "refund", 500, true, 100, 0},  // never above the burst
      {20000ms, "charge", 100, true, 0, 1},
  };
  for (const auto& r : table) {
    CAPTURE(r.at.count());
    CAPTURE(r.op);
    const tp now = t0 + r.at;
    if (std::string(r.op) == "charge") CHECK(b.try_charge(r.n, now) == r.ok);
    else b.refund(r.n, now);
    CHECK(b.remaining(now) == r.remaining_after);
    CHECK(b.retry_after_s(1, now) == r.retry_after_1);
  }
  CHECK(b.retry_after_s(101, t0 + 20s) == -1);  // more than the burst never fits
  CHECK(b.retry_after_s(50, t0 + 20s) == 5);
  CHECK(b.reset_s(t0 + 20s) == doctest::Approx(10.0));
}

TEST_CASE("token bucket: a new limit applies at once; burst 0 means one minute's worth") {
  const tp t0{};
  token_bucket b(6000, 0, t0);
  CHECK(b.burst() == 6000);
  CHECK(b.remaining(t0) == 6000);
  b.set_limit(60, 10, t0);  // what is there is cut to the new burst
  CHECK(b.remaining(t0) == 10);
  CHECK(b.try_charge(10, t0));
  CHECK(b.retry_after_s(10, t0) == 10);  // 1 token a second now
}

TEST_CASE("token bucket: over any window, admitted minus refunded <= rate x window + burst") {
  std::mt19937_64 rng(5);
  for (int trial = 0; trial < 20; ++trial) {
    const double rate = 60.0 * static_cast<double>(1 + rng() % 500);  // tokens per minute
    const double burst = static_cast<double>(1 + rng() % 2000);
    const tp t0{};
    token_bucket b(rate, burst, t0);
    struct event {
      double t;
      std::int64_t net;  // admitted charge, minus a refund
    };
    std::vector<event> events;
    double t = 0;
    for (int i = 0; i < 400; ++i) {
      t += static_cast<double>(rng() % 1000) / 1000.0;
      const tp now = t0 + std::chrono::duration_cast<tp::duration>(std::chrono::duration<double>(t));
      const auto n = static_cast<std::int64_t>(1 + rng() % static_cast<std::uint64_t>(burst));
      if (b.try_charge(n, now)) {
        events.push_back({t, n});
        if (rng() % 3 == 0) {  // the request used only part of it
          const std::int64_t back = static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(n));
          b.refund(back, now);
          events.push_back({t, -back});
        }
      }
    }
    for (std::size_t a = 0; a < events.size(); ++a) {
      double sum = 0;
      for (std::size_t z = a; z < events.size(); ++z) {
        sum += static_cast<double>(events[z].net);
        const double window = events[z].t - events[a].t;
        // Refunds within the window can be spent again, so count the net.
        CHECK(sum <= rate / 60 * window + burst + 1e-6);
      }
    }
  }
}

TEST_CASE("token bucket: Retry-After is honest: a client that waits it out is admitted") {
  std::mt19937_64 rng(9);
  const tp t0{};
  token_bucket b(1200, 500, t0);  // 20 a second
  tp now = t0;
  int checked = 0;
  for (int i = 0; i < 2000; ++i) {
    now += std::chrono::milliseconds(rng() % 300);
    const auto n = static_cast<std::int64_t>(1 + rng() % 500);
    if (b.try_charge(n, now)) continue;
    const std::int64_t wait = b.retry_after_s(n, now);
    REQUIRE(wait > 0);
    CHECK(b.try_charge(n, now + std::chrono::seconds(wait)));  // at exactly that time
    now += std::chrono::seconds(wait);
    ++checked;
  }
  CHECK(checked > 100);
}
