#include "actors/rollout_guard.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include <xxhash.h>

namespace kiln::actors {

std::uint32_t split_point(std::string_view key) {
  return static_cast<std::uint32_t>(XXH3_64bits_withSeed(key.data(), key.size(), 0x6b696c6e) % 10000);
}

const std::string& version_for(const config::model_route& route, std::string_view key) {
  if (route.canary.empty() || route.canary_percent <= 0) return route.live;
  return split_point(key) < route.canary_percent * 100 ? route.canary : route.live;
}

bool shadow_copy(const config::model_route& route, std::string_view key) {
  if (route.shadow.empty() || route.shadow_percent <= 0) return false;
  // Its own seed: the shadowed share does not line up with the canary's.
  const auto p = static_cast<std::uint32_t>(XXH3_64bits_withSeed(key.data(), key.size(), 0x73686477) % 10000);
  return p < route.shadow_percent * 100;
}

void outcome_window::trim(double now, double window_s) {
  while (!samples_.empty() && samples_.front().at < now - window_s) samples_.pop_front();
}

window_stats outcome_window::stats() const {
  window_stats w;
  std::vector<double> ttft;
  std::int64_t failed = 0, completed = 0;
  double output = 0;
  for (const auto& s : samples_) {
    ++w.requests;
    if (s.failed) ++failed;
    if (s.ttft_s >= 0) ttft.push_back(s.ttft_s);
    if (s.completed) {
      ++completed;
      output += s.output_tokens;
    }
  }
  if (w.requests > 0) w.error_rate = static_cast<double>(failed) / static_cast<double>(w.requests);
  if (!ttft.empty()) {
    // Nearest rank: the smallest value with at least 95% of the samples at or below it.
    const auto rank = static_cast<std::size_t>(std::ceil(0.95 * static_cast<double>(ttft.size())));
    std::nth_element(ttft.begin(), ttft.begin() + static_cast<std::ptrdiff_t>(rank - 1), ttft.end());
    w.ttft_p95_s = ttft[rank - 1];
  }
  if (completed > 0) w.mean_output = output / static_cast<double>(completed);
  return w;
}

std::optional<std::string> guard_breach(const window_stats& live, const window_stats& cand,
                                        const config::rollout_config& limits) {
  if (live.requests < limits.guard_min_requests || cand.requests < limits.guard_min_requests) return std::nullopt;
  // Every guard past its margin is named, the error rate first.
  std::string why;
  auto add = [&](const char* fmt, auto... xs) {
    char buf[200];
    std::snprintf(buf, sizeof buf, fmt, xs...);
    why += (why.empty() ? "" : "; ") + std::string(buf);
  };
  const double points = 100 * (cand.error_rate - live.error_rate);
  if (points > limits.error_rate_points)
    add("error rate %.2f%% vs %.2f%% live (+%.2f points, limit %.2f)", 100 * cand.error_rate, 100 * live.error_rate,
        points, limits.error_rate_points);
  if (live.ttft_p95_s > 0 && cand.ttft_p95_s > live.ttft_p95_s * (1 + limits.ttft_p95_increase))
    add("p95 TTFT %.1f ms vs %.1f ms live (+%.0f%%, limit %.0f%%)", 1000 * cand.ttft_p95_s, 1000 * live.ttft_p95_s,
        100 * (cand.ttft_p95_s / live.ttft_p95_s - 1), 100 * limits.ttft_p95_increase);
  if (live.mean_output > 0 && std::abs(cand.mean_output / live.mean_output - 1) > limits.output_length_change)
    add("mean output %.1f tokens vs %.1f live (%+.0f%%, limit +-%.0f%%)", cand.mean_output, live.mean_output,
        100 * (cand.mean_output / live.mean_output - 1), 100 * limits.output_length_change);
  if (!why.empty()) return why;
  return std::nullopt;
}

guard_evidence evidence(const outcome_window& live, const outcome_window& cand, const config::rollout_config& limits) {
  guard_evidence g;
  const window_stats l = live.stats(), c = cand.stats();
  if (l.requests == 0 || c.requests == 0) return g;
  // Error rate: is the candidate worse at all, beyond chance? (Errors are rare: the margin is
  // checked on the point figures, the evidence here only rules out chance.)
  const double nl = static_cast<double>(l.requests), nc = static_cast<double>(c.requests);
  const double se_err = std::sqrt(std::max(c.error_rate * (1 - c.error_rate), 1.0 / nc) / nc +
                                  l.error_rate * (1 - l.error_rate) / nl);
  g.errors = (c.error_rate - l.error_rate) / se_err;
  // p95 TTFT: if the candidate's p95 were within the margin, at most 5% of its requests would
  // be slower than the live p95 times (1 + margin).
  const double slow = l.ttft_p95_s * (1 + limits.ttft_p95_increase);
  double over = 0, with_ttft = 0;
  double out_sum = 0, out_sq = 0, done = 0;
  for (const auto& s : cand.samples()) {
    if (s.ttft_s >= 0) {
      ++with_ttft;
      over += s.ttft_s > slow;
    }
    if (s.completed) {
      ++done;
      out_sum += s.output_tokens;
      out_sq += static_cast<double>(s.output_tokens) * s.output_tokens;
    }
  }
  if (with_ttft > 0 && l.ttft_p95_s > 0) g.ttft = (over - 0.05 * with_ttft) / std::sqrt(0.05 * 0.95 * with_ttft);
  // Mean output: is the difference beyond the margin, beyond chance (both sides' spread)?
  double l_done = 0, l_sum = 0, l_sq = 0;
  for (const auto& s : live.samples())
    if (s.completed) {
      ++l_done;
      l_sum += s.output_tokens;
      l_sq += static_cast<double>(s.output_tokens) * s.output_tokens;
    }
  if (done > 1 && l_done > 1 && l_sum > 0) {
    const double mc = out_sum / done, ml = l_sum / l_done;
    const double vc = std::max(0.0, out_sq / done - mc * mc), vl = std::max(0.0, l_sq / l_done - ml * ml);
    const double se = std::sqrt(vc / done + vl / l_done);
    if (se > 0) g.output = (std::abs(mc - ml) - limits.output_length_change * ml) / se;
  }
  return g;
}

std::optional<std::string> confirmed_breach(const outcome_window& live, const outcome_window& cand,
                                            const config::rollout_config& limits) {
  const window_stats l = live.stats(), c = cand.stats();
  if (!guard_breach(l, c, limits)) return std::nullopt;
  // Keep only the margins the evidence bears out.
  const guard_evidence g = evidence(live, cand, limits);
  config::rollout_config only = limits;
  const double off = 1e9;
  if (g.errors < limits.guard_z) only.error_rate_points = off;
  if (g.ttft < limits.guard_z) only.ttft_p95_increase = off;
  if (g.output < limits.guard_z) only.output_length_change = off;
  return guard_breach(l, c, only);
}

}  // namespace kiln::actors
