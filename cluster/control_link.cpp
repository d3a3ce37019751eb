#include "cluster/control_link.hpp"

#include <chrono>
#include <utility>
#include <vector>

#include <caf/all.hpp>

#include "actors/meter.hpp"
#include "actors/node_supervisor.hpp"
#include "actors/region_limits.hpp"
#include "actors/request.hpp"
#include "cluster/wire.hpp"

namespace kiln::cluster {

namespace {

using find_atom = caf::atom_constant<caf::atom("find")>;
using shares_atom = caf::atom_constant<caf::atom("shares")>;
constexpr auto kFindEvery = std::chrono::seconds(1);

struct link_state {
  caf::actor directory;
  caf::actor store;  ///< the control node's store writer; null while none is reachable
  bool finding = false;
  /// Calls that came while the store was being found: sent on, or refused, once it is known.
  std::vector<std::pair<caf::response_promise, caf::message>> waiting;
  static inline const char* name = "kiln.control_link";
};

using self_ptr = caf::stateful_actor<link_state>*;

caf::error unreachable() {
  return actors::make_error(actors::errc::unavailable,
                            "No control node is reachable: limit changes, registrations and rollouts wait until one is "
                            "(requests are served from the last configuration received, GET /admin/config).");
}

void find(self_ptr self) {
  auto& st = self->state;
  if (st.store || st.finding) return;
  st.finding = true;
  self->request(st.directory, std::chrono::seconds(5), control_atom::value)
      .then(
          [self](caf::actor& store) {
            auto& st = self->state;
            st.finding = false;
            st.store = store;
            self->monitor(store);
            for (auto& [rp, msg] : std::exchange(st.waiting, {})) rp.delegate(store, std::move(msg));
            // What the meter logged while no store was reachable goes there now.
            if (auto meter = caf::actor_cast<caf::actor>(self->system().registry().get(actors::meter_name)))
              self->send(meter, actors::fold_now_atom::value);
          },
          [self](caf::error&) {
            auto& st = self->state;
            st.finding = false;
            for (auto& [rp, msg] : std::exchange(st.waiting, {})) rp.deliver(unreachable());
            self->delayed_send(self, kFindEvery, find_atom::value);
          });
}

// This region's use of shared limits to the control node; its shares back to admission.
void exchange_shares(self_ptr self) {
  self->delayed_send(self, actors::kRegionSharesEvery, shares_atom::value);
  actors::exchange_region_shares(self, caf::actor_cast<caf::actor>(self->system().registry().get(actors::admission_name)),
                                 self->state.store);
}

caf::behavior control_link(self_ptr self, caf::actor directory) {
  self->state.directory = std::move(directory);
  self->set_down_handler([self](caf::down_msg& dm) {
    if (dm.source != self->state.store.address()) return;
    self->state.store = nullptr;
    find(self);
  });
  // Every store call: to the control node's store writer, whose answer goes to the caller (with
  // none known, after one try to find it).
  self->set_default_handler([self](caf::scheduled_actor*, caf::message_view& x) -> caf::result<caf::message> {
    auto& st = self->state;
    auto rp = self->make_response_promise();
    if (st.store) {
      rp.delegate(st.store, x.move_content_to_message());
    } else {
      st.waiting.emplace_back(rp, x.move_content_to_message());
      find(self);
    }
    return rp;
  });
  find(self);
  self->send(self, shares_atom::value);
  return {
      [self](find_atom) { find(self); },
      [self](shares_atom) { exchange_shares(self); },
  };
}

}  // namespace

caf::actor spawn_control_link(caf::actor_system& sys, caf::actor directory) {
  return sys.spawn(control_link, std::move(directory));
}

}  // namespace kiln::cluster
