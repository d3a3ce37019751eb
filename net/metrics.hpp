#pragma once
// Front-side counters and the Prometheus text exposition of /metrics.
#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "actors/gauges.hpp"

namespace kiln::net {

class front_metrics {
 public:
  void count_request(int status) {
    std::lock_guard lock(mu_);
    ++by_status_[status];
  }
  std::atomic<std::uint64_t> tokens_streamed{0};
  std::atomic<std::int64_t> open_streams{0};
  std::atomic<std::int64_t> open_connections{0};

  std::map<int, std::uint64_t> requests_by_status() const {
    std::lock_guard lock(mu_);
    return by_status_;
  }

 private:
  mutable std::mutex mu_;
  std::map<int, std::uint64_t> by_status_;
};

/// Prometheus text format (version 0.0.4).
std::string render_metrics(const front_metrics& m, const actors::fleet_gauges& g);

}  // namespace kiln::net
