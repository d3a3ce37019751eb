#pragma once
// A replica: fronts one engine actor, forwards jobs to it and reports its queue depth and
// tokens in flight to the router every second.
#include <string>

#include <caf/stateful_actor.hpp>

#include "actors/messages.hpp"

namespace kiln::actors {

struct replica_state {
  std::string replica_id;
  caf::actor engine;
  caf::actor router;
  std::int64_t forwarded_tokens = 0;  ///< job tokens passed to the engine so far
  static inline const char* name = "kiln.replica";
};

caf::behavior replica(caf::stateful_actor<replica_state>* self, std::string replica_id,
                      caf::actor engine, caf::actor router);

}  // namespace kiln::actors
