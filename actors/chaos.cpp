#include "actors/chaos.hpp"

#include <chrono>

#include <caf/all.hpp>

namespace kiln::actors {

void freeze(caf::event_based_actor* self, double seconds) {
  self->set_default_handler(caf::skip);
  self->become(caf::keep_behavior, [self](thaw_atom) {
    self->set_default_handler(caf::print_and_drop);
    self->unbecome();
  });
  const auto d = std::chrono::duration_cast<caf::timespan>(std::chrono::duration<double>(seconds));
  self->delayed_send(self, d, thaw_atom::value);
}

void chaos_kill(const caf::actor& target) {
  if (target) caf::anon_send_exit(target, caf::exit_reason::kill);
}

}  // namespace kiln::actors
