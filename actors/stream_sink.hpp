#pragma once
// The bridge from actors to a client connection: a sink actor per connection hands each
// stream event to a stream_target, which the front implements by posting onto its strand.
#include <memory>

#include "actors/messages.hpp"

namespace caf { class actor_system; }

namespace kiln::actors {

class stream_target {
 public:
  virtual ~stream_target() = default;
  virtual void on_tokens(stream_tokens ev) = 0;
  virtual void on_end(stream_end ev) = 0;
  virtual void on_error(stream_error ev) = 0;
  /// The team's token limit before the request runs (or is refused); ignored by default.
  virtual void on_rate_limit(rate_limit_info) {}
  /// Starts loading (never waiting for) what on_tokens will touch, one link deeper per
  /// `depth` (1: this object's own fields, 2: the next object it calls, ...), so a batch
  /// can warm the streams ahead of the one it writes; nothing by default.
  virtual void warm(int /*depth*/) const {}
};

/// Spawns a sink for one connection. Ending it (stop_sink) tells every engine holding one of
/// its requests that the client is gone.
caf::actor spawn_stream_sink(caf::actor_system& sys, std::shared_ptr<stream_target> target);
void stop_sink(const caf::actor& sink);
/// Hands a request to the clustered front's balancer, else the node's admission, from outside
/// any actor; false when there is neither (the node is stopping).
bool submit(caf::actor_system& sys, request r);

}  // namespace kiln::actors
