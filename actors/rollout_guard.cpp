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
  char buf[200];
  const double points = 100 * (cand.error_rate - live.error_rate);
  if (points > limits.error_rate_points) {
    std::snprintf(buf, sizeof buf, "error rate %.2f%% vs %.2f%% live (+%.2f points, limit %.2f)", 100 * cand.error_rate,
                  100 * live.error_rate, points, limits.error_rate_points);
    return buf;
  }
  if (live.ttft_p95_s > 0 && cand.ttft_p95_s > live.ttft_p95_s * (1 + limits.ttft_p95_increase)) {
    std::snprintf(buf, sizeof buf, "p95 TTFT %.1f ms vs %.1f ms live (+%.0f%%, limit %.0f%%)", 1000 * cand.ttft_p95_s,
                  1000 * live.ttft_p95_s, 100 * (cand.ttft_p95_s / live.ttft_p95_s - 1), 100 * limits.ttft_p95_increase);
    return buf;
  }
  if (live.mean_output > 0 && std::abs(cand.mean_output / live.mean_output - 1) > limits.output_length_change) {
    std::snprintf(buf, sizeof buf, "mean output %.1f tokens vs %.1f live (%+.0f%%, limit +-%.0f%%)", cand.mean_output,
                  live.mean_output, 100 * (cand.mean_output / live.mean_output - 1), 100 * limits.output_length_change);
    return buf;
  }
  return std::nullopt;
}

}  // namespace kiln::actors
