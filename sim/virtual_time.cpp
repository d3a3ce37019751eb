#include "sim/virtual_time.hpp"

#include <caf/atom.hpp>

namespace kiln::sim {

void use_virtual_time(caf::actor_system_config& cfg) {
  cfg.set("scheduler.policy", caf::atom("testing"));
  cfg.set("logger.console", caf::atom("none"));
}

bool virtual_time::step(caf::actor_clock::time_point limit) {
  auto& clock = sched_.clock();
  const auto& pending = clock.schedule();
  if (pending.empty() || pending.begin()->first > limit) return false;
  clock.trigger_timeout();
  sched_.run();
  return true;
}

void virtual_time::run_for(caf::timespan d) {
  const auto limit = now() + d;
  run_ready();
  while (step(limit)) {
  }
  auto& clock = sched_.clock();
  if (clock.current_time < limit) clock.current_time = limit;
}

}  // namespace kiln::sim
