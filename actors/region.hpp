#pragma once
// Wires one region's actors from config: per pool, engines, replicas and a router shard;
// one admission actor in front. Where actors are spawned is decided here, not in them.
#include <memory>
#include <string>
#include <vector>

#include <caf/actor.hpp>

#include "actors/engine_gauges.hpp"
#include "config/config.hpp"

namespace caf { class actor_system; }

namespace kiln::actors {

struct region_handles {
  caf::actor admission;
  std::vector<caf::actor> routers;
  std::vector<caf::actor> replicas;
  std::vector<caf::actor> engines;
  std::vector<std::string> pool_failures;  ///< "model: why" for pools that cannot serve
};

region_handles spawn_region(caf::actor_system& sys, std::shared_ptr<const config::kiln_config> cfg,
                            std::shared_ptr<engine_gauges> gauges);
/// Ends every actor of the region.
void stop_region(const region_handles& r);

}  // namespace kiln::actors
