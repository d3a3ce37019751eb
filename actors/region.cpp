#include "actors/region.hpp"

#include <caf/all.hpp>

#include "actors/admission.hpp"
#include "actors/engine_actor.hpp"
#include "actors/replica.hpp"
#include "actors/router_shard.hpp"

namespace kiln::actors {

region_handles spawn_region(caf::actor_system& sys, std::shared_ptr<const config::kiln_config> cfg,
                            std::shared_ptr<engine_gauges> gauges) {
  region_handles r;
  std::map<std::string, model_route, std::less<>> models;
  for (const config::pool_config& p : cfg->pools) {
    auto pool = prepare_pool(p);
    auto router = sys.spawn(router_shard, p.model);
    models.emplace(p.model, model_route{router, pool});
    r.routers.push_back(router);
    if (!pool->failure.empty()) {
      r.pool_failures.push_back(p.model + ": " + pool->failure);
      continue;  // admission answers for it
    }
    replica_set set;
    for (int i = 0; i < p.replicas; ++i) {
      const std::string id = p.model + "-" + p.version + "-r" + std::to_string(i);
      const engine_identity who{id, p.model, p.version, cfg->region};
      auto engine = sys.spawn(engine_actor, who, pool, gauges);
      auto rep = sys.spawn(replica, id, engine, router);
      set.replicas.push_back(rep);
      set.ids.push_back(id);
      r.engines.push_back(engine);
      r.replicas.push_back(rep);
    }
    caf::anon_send(router, std::move(set));
  }
  r.admission = sys.spawn(admission, cfg, std::move(models));
  return r;
}

void stop_region(const region_handles& r) {
  auto stop = [](const caf::actor& a) {
    if (a) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
  };
  stop(r.admission);
  for (const auto& a : r.routers) stop(a);
  for (const auto& a : r.replicas) stop(a);
  for (const auto& a : r.engines) stop(a);
}

}  // namespace kiln::actors
