#pragma once
// Front-side counters and histograms, and the Prometheus text exposition of /metrics.
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <tuple>

#include "actors/gauges.hpp"
#include "config/config.hpp"

namespace kiln::net {

/// A Prometheus histogram with fixed bucket bounds (seconds).
struct latency_histogram {
  static constexpr std::array<double, 12> bounds = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                                    0.5,   1.0,  2.5,   5.0,  10.0, 30.0};
  std::array<std::uint64_t, 12> counts{};  ///< per bound, not cumulative
  std::uint64_t count = 0;
  double sum = 0;
  void observe(double v);
};

class front_metrics {
 public:
  /// One answered request; team and model "" when it had none.
  void count_request(int status, const std::string& team, const std::string& model) {
    std::lock_guard lock(mu_);
    ++by_status_[status];
    if (!team.empty()) ++by_team_[{team, model, status}];
  }
  /// A completed chat completion's time to first token and time per output token after it.
  void observe_latency(const std::string& model, double ttft_s, double tpot_s) {
    std::lock_guard lock(mu_);
    ttft_[model].observe(ttft_s);
    if (tpot_s >= 0) tpot_[model].observe(tpot_s);
  }
  std::atomic<std::uint64_t> tokens_streamed{0};
  std::atomic<std::int64_t> open_streams{0};
  std::atomic<std::int64_t> open_connections{0};
  const std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();

  std::map<int, std::uint64_t> requests_by_status() const {
    std::lock_guard lock(mu_);
    return by_status_;
  }
  std::map<std::tuple<std::string, std::string, int>, std::uint64_t> requests_by_team() const {
    std::lock_guard lock(mu_);
    return by_team_;
  }
  std::map<std::string, latency_histogram> ttft() const {
    std::lock_guard lock(mu_);
    return ttft_;
  }
  std::map<std::string, latency_histogram> tpot() const {
    std::lock_guard lock(mu_);
    return tpot_;
  }

 private:
  mutable std::mutex mu_;
  std::map<int, std::uint64_t> by_status_;
  std::map<std::tuple<std::string, std::string, int>, std::uint64_t> by_team_;
  std::map<std::string, latency_histogram> ttft_, tpot_;  ///< by model as asked
};

/// Prometheus text format (version 0.0.4). `cfg` prices the pools (gpu_hour_usd).
std::string render_metrics(const front_metrics& m, const actors::fleet_gauges& g, const config::kiln_config& cfg);

}  // namespace kiln::net
