#include "sim/virtual_time.hpp"

#include <algorithm>

#include <caf/atom.hpp>
#include <caf/detail/simple_actor_clock.hpp>
#include <caf/mailbox_element.hpp>

#include "actors/wake_ticket.hpp"

namespace kiln::sim {

void use_virtual_time(caf::actor_system_config& cfg) {
  cfg.set("scheduler.policy", caf::atom("testing"));
  cfg.set("logger.console", caf::atom("none"));
}

namespace {

// Whether the first pending event is a delayed message whose wake ticket was voided since it
// was sent (see actors/wake_ticket.hpp): delivered, it would do nothing.
bool first_is_void(const caf::detail::simple_actor_clock::schedule_map& pending) {
  using clock_type = caf::detail::simple_actor_clock;
  const clock_type::delayed_event& ev = *pending.begin()->second;
  if (ev.subtype != clock_type::actor_msg_type) return false;
  const caf::type_erased_tuple& m = static_cast<const clock_type::actor_msg&>(ev).content->content();
  return m.match_elements<caf::atom_value, actors::wake_ticket>() && m.get_as<actors::wake_ticket>(1).void_now();
}

}  // namespace

bool virtual_time::step(caf::actor_clock::time_point limit) {
  auto& clock = sched_.clock();
  const auto& pending = clock.schedule();
  // A void wakeup is dropped as its time comes, the clock moving to it as if delivered. CAF's
  // clock lets no one take back a delayed message (it has no link to it but its place here).
  while (!pending.empty() && pending.begin()->first <= limit && first_is_void(pending)) {
    clock.current_time = std::max(clock.current_time, pending.begin()->first);
    const_cast<caf::detail::simple_actor_clock::schedule_map&>(pending).erase(pending.begin());
  }
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
