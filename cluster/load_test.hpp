#pragma once
// A version's gate on a real executor (cpu, cuda): a short load test on one engine, run on
// the calling thread (a loader thread). Concurrency doubles from one stream until p95 time to
// first token passes the limit or the slowest streams fall below the floor (the simulator's
// capacity targets); the highest passing level gives the figures the registry stores.
#include <string>
#include <variant>

#include "config/config.hpp"
#include "config/registry.hpp"

namespace kiln::cluster {

struct load_test_plan {
  int prompt_tokens = 128;
  int output_tokens = 48;
  int max_streams = 64;           ///< and the pool's max_running
  double ttft_p95_limit_s = 1.0;
  double min_stream_tokens_per_s = 30;
  double budget_s = 60;           ///< no level starts past this much time
};

/// The measured capacity of one replica of `pool`, or why there is none.
std::variant<config::load_test, std::string> real_load_test(const config::pool_config& pool,
                                                            const load_test_plan& plan = {});

}  // namespace kiln::cluster
