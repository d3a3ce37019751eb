#pragma once
// Admission for a region: resolves the API key to a team, the model to its router, checks
// the request against the pool's limits, and passes it on. Failures end at the sink.
#include <map>
#include <memory>
#include <string>

#include <caf/stateful_actor.hpp>

#include "actors/messages.hpp"
#include "actors/pool_runtime.hpp"
#include "config/config.hpp"

namespace kiln::actors {

/// What admission knows of one model: its router and its runtime.
struct model_route {
  caf::actor router;
  std::shared_ptr<const pool_runtime> runtime;
};

struct admission_state {
  std::shared_ptr<const config::kiln_config> cfg;
  std::map<std::string, model_route, std::less<>> models;

  /// Fills in team, prompt tokens and defaults, or says why the job cannot run.
  std::optional<stream_error> admit(chat_job& job) const;
  static inline const char* name = "kiln.admission";
};

caf::behavior admission(caf::stateful_actor<admission_state>* self,
                        std::shared_ptr<const config::kiln_config> cfg,
                        std::map<std::string, model_route, std::less<>> models);

}  // namespace kiln::actors
