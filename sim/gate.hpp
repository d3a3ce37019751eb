#pragma once
// A version's gate: the capacity scenario run on one replica of its pool (sim executor). The
// arrival rate rises step by step until p95 TTFT passes the limit or the slowest streams fall
// below the floor; the highest passing step gives the version's measured capacity, which the
// registry stores (load_test_tokens_per_s, load_test_tokens_in_flight) for the autoscaler.
#include <string>
#include <variant>

#include "config/config.hpp"
#include "sim/report.hpp"
#include "sim/scenario.hpp"

namespace kiln::sim {

/// Whether a capacity step met the targets (p95 TTFT, and streams fast enough).
bool passes(const run_summary& m, const capacity_search& c);

struct gate_result {
  double rate = 0;              ///< requests/s of the highest passing step
  double tokens_per_s = 0;      ///< output tokens/s of the replica at that step
  double tokens_in_flight = 0;  ///< mean tokens in flight on the replica at that step
  double ttft_p95_ms = 0;
  int steps = 0;                ///< steps run
};

/// Gates one replica of `pool`; an error when the pool is not on the sim executor or no step
/// passes.
std::variant<gate_result, std::string> gate_capacity(const config::pool_config& pool);

}  // namespace kiln::sim
