#pragma once
// The engine actor: owns one engine_core and advances it one step at a time. A sim step's
// modelled duration passes on the actor clock before its tokens go to the sinks, so the same
// actor runs on real time in `kiln serve` and on virtual time in tests. A cpu or cuda step
// runs on the core's worker thread and its end arrives as a message, so the actor never
// waits on a forward pass or a GPU; meanwhile it serves its mailbox (new jobs, departed
// clients).
#include <chrono>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include <caf/stateful_actor.hpp>

#include "actors/engine_gauges.hpp"
#include "actors/messages.hpp"
#include "actors/pool_runtime.hpp"
#include "config/config.hpp"
#include "engine/engine_core.hpp"

namespace kiln::actors {

struct engine_identity {
  std::string replica_id;
  std::string model;
  std::string version;
  std::string region;
};

struct engine_state {
  struct job {
    caf::actor sink;
    std::string team;
    caf::actor_clock::time_point arrival;
    double ttft_ms = -1;
  };
  std::unique_ptr<engine::engine_core> core;
  std::string failure;  ///< set when the core could not be built: every job gets it as a 503
  engine_identity who;
  int default_max_tokens = 1024;
  std::unordered_map<std::uint64_t, job> jobs;
  std::unordered_set<caf::actor_addr> watched;  ///< sinks this engine monitors
  engine::step_result pending;                  ///< the step now "running"
  bool stepping = false;
  std::uint64_t steps = 0;
  double load_seconds = 0;
  std::shared_ptr<engine_gauges> gauges;

  engine::engine_request to_request(const chat_job& j) const;
  /// Drops every job whose sink is gone; returns how many.
  int cancel_sink(const caf::actor_addr& sink);
  void publish() const;
  static inline const char* name = "kiln.engine";
};

/// Builds the engine core a pool's runtime describes (sim, cpu or cuda executor), or says
/// why it cannot (the device ran out of memory, say).
std::variant<std::unique_ptr<engine::engine_core>, std::string> make_engine_core(const pool_runtime& pool,
                                                                                 std::uint64_t salt);

caf::behavior engine_actor(caf::stateful_actor<engine_state>* self, engine_identity who,
                           std::shared_ptr<const pool_runtime> pool, std::shared_ptr<engine_gauges> gauges);

}  // namespace kiln::actors
