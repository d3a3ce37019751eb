#include "actors/remote_replica.hpp"

#include "actors/ask.hpp"

#include <cstdio>

#include <caf/all.hpp>

namespace kiln::actors {

namespace {

using stateful = caf::stateful_actor<remote_replica_state>;
using place_atom = caf::atom_constant<caf::atom("place")>;

constexpr auto kRetry = std::chrono::seconds(1);
constexpr auto kHostTimeout = std::chrono::seconds(300);  // a worker may still be loading the pool

replica_status own_status(const remote_replica_state& st) {
  replica_status s;
  s.replica_id = st.d.who.replica_id;
  s.phase = st.drained ? replica_phase::stopped : replica_phase::starting;
  return s;
}

// Says why once (and again when the reason changes), then tries every second.
void retry_later(stateful* self, const std::string& why) {
  auto& st = self->state;
  st.placing = false;
  if (why != st.last_why)
    std::fprintf(stderr, "kiln: replica %s: not placed on a worker (%s); trying every second\n",
                 st.d.who.replica_id.c_str(), why.c_str());
  st.last_why = why;
  self->delayed_send(self, kRetry, place_atom::value);
}

void place(stateful* self) {
  auto& st = self->state;
  if (st.remote || st.placing || st.drained) return;
  auto finder = caf::actor_cast<caf::actor>(self->home_system().registry().get(worker_finder_name));
  if (!finder) return retry_later(self, "the node has not joined its cluster");
  st.placing = true;
  self->request(finder, std::chrono::seconds(5), find_worker_atom::value, st.d.who.replica_id)
      .then(
          [self](caf::actor& host) {
            auto& st = self->state;
            const auto cold_ms = std::chrono::duration_cast<std::chrono::milliseconds>(st.d.cold_start).count();
            host_replica h{st.d.who.replica_id, st.d.who.model, st.d.who.version, st.d.who.region, st.router, cold_ms,
                           st.registered};
            self->request(host, kHostTimeout, std::move(h))
                .then(
                    [self, host](caf::actor& r) {
                      auto& st = self->state;
                      st.placing = false;
                      st.last_why.clear();
                      st.remote = r;
                      *st.placed = {host, st.d.who.replica_id};
                      self->monitor(r);
                      if (st.drained) self->send(r, drain_atom::value);
                    },
                    [self](caf::error& e) { retry_later(self, self->system().render(e)); });
          },
          [self](caf::error& e) { retry_later(self, self->system().render(e)); });
}

}  // namespace

caf::behavior remote_replica(stateful* self, replica_deps deps, caf::actor router,
                             std::vector<config::model_version> registered) {
  auto& st = self->state;
  st.d = std::move(deps);
  st.router = std::move(router);
  st.registered = std::move(registered);
  st.placed = std::make_shared<std::pair<caf::actor, std::string>>();
  self->attach_functor([placed = st.placed] {
    if (placed->first) caf::anon_send(placed->first, unhost_replica{placed->second});
  });
  self->set_down_handler([self](caf::down_msg& dm) {
    if (dm.source != self->state.remote.address()) return;
    std::fprintf(stderr, "kiln: replica %s: its hosted replica ended (%s)\n", self->state.d.who.replica_id.c_str(),
                 caf::to_string(dm.reason).c_str());
    self->state.placed->first = nullptr;  // nothing left to unhost
    self->quit(dm.reason ? dm.reason : caf::make_error(caf::sec::runtime_error, "hosted replica ended"));
  });
  self->send(self, place_atom::value);
  self->send(self, tick_atom::value);
  return {
      [self](place_atom) { place(self); },
      [self](tick_atom) {
        auto& st = self->state;
        if (st.remote) return;  // the hosted replica beats itself
        if (st.router) self->send(st.router, own_status(st));
        self->delayed_send(self, st.d.heartbeat, tick_atom::value);
      },
      [self](router_is& r) {
        auto& st = self->state;
        st.router = r.router;
        if (st.remote) self->send(st.remote, r);
      },
      [self](drain_atom) -> caf::result<std::string> {
        auto& st = self->state;
        if (st.remote) return pass_on<std::string>(self, st.remote, drain_atom::value, std::chrono::seconds(2));
        st.drained = true;
        return std::string(to_string(replica_phase::stopped));
      },
      [self](undrain_atom) -> caf::result<std::string> {
        auto& st = self->state;
        if (st.remote) return pass_on<std::string>(self, st.remote, undrain_atom::value, std::chrono::seconds(2));
        if (st.drained) self->send(self, place_atom::value);  // placed as it would have been
        st.drained = false;
        return std::string(to_string(replica_phase::starting));
      },
      [self](chaos_order& o) {
        if (o.action == chaos_action::kill) return self->quit(caf::exit_reason::kill);
        if (self->state.remote) self->send(self->state.remote, o);
      },
      [self](engine_chaos& c) {
        if (self->state.remote) self->send(self->state.remote, c);
      },
      [self](state_atom) -> caf::result<replica_status> {
        if (self->state.remote) return pass_on<replica_status>(self, self->state.remote, state_atom::value, std::chrono::seconds(2));
        return own_status(self->state);
      },
  };
}

}  // namespace kiln::actors
