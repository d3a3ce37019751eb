#pragma once
// Latest per-engine figures for /metrics. Each engine actor writes only its own row; the
// front reads a snapshot. An export point, not state the actors share with each other.
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace kiln::actors {

struct engine_gauge {
  std::string replica_id;
  std::string model;
  std::string version;
  int running = 0;
  int waiting = 0;
  std::int64_t tokens_in_flight = 0;
  std::uint64_t steps = 0;
  std::uint64_t preemptions = 0;
  int kv_blocks_free = 0;
  int kv_blocks_total = 0;
  double load_seconds = 0;  ///< reading the model plus putting its weights in place
  double weight_bytes = 0;
};

class engine_gauges {
 public:
  void set(const engine_gauge& g) {
    std::lock_guard lock(mu_);
    rows_[g.replica_id] = g;
  }
  std::vector<engine_gauge> snapshot() const {
    std::lock_guard lock(mu_);
    std::vector<engine_gauge> out;
    for (const auto& [k, v] : rows_) out.push_back(v);
    return out;
  }

 private:
  mutable std::mutex mu_;
  std::map<std::string, engine_gauge> rows_;
};

}  // namespace kiln::actors
