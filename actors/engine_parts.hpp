#pragma once
// What the engine actors share: kiln's own (engine_actor) and a remote pool's (remote_engine).
#include <algorithm>
#include <string>
#include <unordered_set>

#include <caf/event_based_actor.hpp>

#include "actors/engine_actor.hpp"

namespace kiln::actors::engine_parts {

/// Monitors `a` once (sinks, clients and owners of the engine's requests).
inline void watch(caf::event_based_actor* self, std::unordered_set<caf::actor_addr>& watched, const caf::actor& a) {
  if (a && watched.insert(a.address()).second) self->monitor(a);
}

/// Whether a request's owner is still there to hear its end (else its sink does).
inline bool owner_alive(const std::unordered_set<caf::actor_addr>& gone_owners, const caf::actor& owner) {
  return owner && !gone_owners.count(owner.address());
}

/// A request's end told straight to its sink (its owner has ended).
inline stream_end end_at_sink(const request_id& id, engine::finish_reason finish, const engine::usage& u,
                              const engine_identity& who, double ttft_ms, std::uint8_t attempt) {
  stream_end end;
  end.id = id;
  end.finish_reason = std::string(engine::to_string(finish));
  end.prompt_tokens = u.prompt_tokens;
  end.completion_tokens = u.completion_tokens;
  end.cached_tokens = u.cached_tokens;
  end.model_version = who.version;
  end.region = who.region;
  end.replica_id = who.replica_id;
  end.engine_ttft_ms = std::max(0.0, ttft_ms);
  end.attempts = attempt + 1;
  return end;
}

}  // namespace kiln::actors::engine_parts
