#pragma once
// Admission for a region: resolves the API key to a team, the model to its router, checks
// the request against the pool's limits, and passes it on. Failures end at the sink.
#include <map>
#include <memory>
#include <string>

#include <caf/stateful_actor.hpp>

#include "actors/messages.hpp"
#include "config/config.hpp"

namespace kiln::actors {

struct admission_state {
  std::shared_ptr<const config::kiln_config> cfg;
  std::map<std::string, caf::actor, std::less<>> routers;  ///< model -> router shard

  /// Fills in team and defaults, or says why the job cannot run.
  std::optional<stream_error> admit(chat_job& job) const;
  static inline const char* name = "kiln.admission";
};

caf::behavior admission(caf::stateful_actor<admission_state>* self,
                        std::shared_ptr<const config::kiln_config> cfg,
                        std::map<std::string, caf::actor, std::less<>> routers);

}  // namespace kiln::actors
