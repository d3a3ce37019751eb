#include "actors/replica.hpp"

#include <cstdio>

#include <caf/all.hpp>

#include "actors/chaos.hpp"
#include "actors/one_way.hpp"
#include "actors/remote_engine.hpp"

namespace kiln::actors {

replica_status replica_state::status() const {
  replica_status s;
  s.replica_id = d.who.replica_id;
  s.phase = phase;
  const bool takes = phase == replica_phase::serving || phase == replica_phase::draining;
  if (takes && engine_ready) s.engine = engine();
  s.load = last;
  s.restarts = static_cast<std::uint32_t>(sup.restarts());
  return s;
}

void replica_state::publish() const {
  if (!d.gauges) return;
  d.gauges->set_replica(
      {d.who.replica_id, d.who.model, d.who.version, std::string(to_string(phase)), sup.restarts(), 0, ready_seconds});
}

namespace {

using stateful = caf::stateful_actor<replica_state>;

void report(stateful* self) {
  auto& st = self->state;
  st.publish();
  if (st.router) self->send(st.router, st.status());
}

void stop_engine(stateful* self) {
  auto& st = self->state;
  st.sup.stop(self, "engine");
  st.engine_ready = false;
  st.last = {};
  st.phase = replica_phase::stopped;
}

// One heartbeat: the engine's figures when it serves, else the phase alone. An engine that
// does not answer within the period means no beat this time. The deadline is checked when
// the answer comes rather than by a request timeout, which the clock would hold (and fire,
// to no one) for every beat, answered or not.
void beat(stateful* self) {
  auto& st = self->state;
  const bool takes = st.phase == replica_phase::serving || st.phase == replica_phase::draining;
  if (!takes || !st.engine_ready) return report(self);
  const auto engine = st.engine();
  const auto due = self->clock().now() + st.d.heartbeat * 9 / 10;
  self->request(engine, caf::infinite, stats_atom::value)
      .then(
          [self, engine, due](engine_load& l) {
            auto& st = self->state;
            if (self->clock().now() > due) return;  // too late: this beat was missed
            if (engine != st.engine()) return;      // answered by an engine since replaced
            st.last = l;
            if (st.phase == replica_phase::draining && l.running + l.waiting == 0) stop_engine(self);
            report(self);
          },
          [](caf::error&) {});
}

void on_chaos(stateful* self, const chaos_order& o) {
  switch (o.action) {
    case chaos_action::freeze: freeze(self, o.seconds); break;
    case chaos_action::slow:
    case chaos_action::fail:
      if (auto e = self->state.engine()) self->send(e, o);  // its engine's, not its own
      break;
    case chaos_action::kill: self->quit(caf::exit_reason::kill); break;
  }
}

}  // namespace

caf::behavior replica(stateful* self, replica_deps deps, caf::actor router) {
  auto& st = self->state;
  st.d = std::move(deps);
  st.router = std::move(router);
  const replica_deps& d = st.d;
  child_spec engine{"engine",
                    [d](caf::local_actor* parent) {
                      if (d.pool->cfg->executor == config::executor_kind::remote)
                        return parent->system().spawn(remote_engine, d.who, d.upstream, d.pool, d.gauges,
                                                      caf::actor_cast<caf::actor>(parent));
                      return parent->system().spawn(engine_actor, d.who, d.pool, d.gauges, d.loader,
                                                    caf::actor_cast<caf::actor>(parent));
                    },
                    restart_policy::permanent};
  st.sup = supervisor(st.d.engine_restarts, {engine});
  if (st.d.gauges) st.d.gauges->count_start(st.d.who.replica_id);
  st.started_at = self->clock().now();
  if (st.d.cold_start > caf::timespan{0}) {
    st.phase = replica_phase::starting;  // the node, its weights and its warm-up are not there yet
    self->delayed_send(self, st.d.cold_start, warm_atom::value);
  } else {
    st.sup.start_all(self);
    st.phase = replica_phase::loading;
  }
  st.publish();
  self->set_down_handler([self](caf::down_msg& dm) {
    auto& st = self->state;
    const auto out = st.sup.on_down(self, dm.source, dm.reason);
    if (!out.ours) return;
    st.engine_ready = false;
    st.last = {};
    if (out.escalate) {
      std::fprintf(stderr, "kiln: replica %s: engine restarts exceeded the intensity; giving up\n",
                   st.d.who.replica_id.c_str());
      self->quit(caf::make_error(caf::sec::runtime_error, "engine restart intensity exceeded"));
      return;
    }
    if (st.phase == replica_phase::draining || st.phase == replica_phase::stopped) stop_engine(self);
    else if (!out.restarted.empty()) st.phase = replica_phase::loading;
    report(self);
  });
  self->send(self, tick_atom::value);
  return {
      [self](tick_atom) -> one_way {
        self->delayed_send(self, self->state.d.heartbeat, tick_atom::value);
        beat(self);
        return handled;
      },
      [self](warm_atom) {
        auto& st = self->state;
        if (st.phase != replica_phase::starting) return;  // drained before it was warm
        st.sup.start_all(self);
        st.phase = replica_phase::loading;
        report(self);
      },
      [self](engine_ready&) {
        auto& st = self->state;
        if (self->current_sender() != caf::actor_cast<caf::strong_actor_ptr>(st.engine())) return;
        st.engine_ready = true;
        if (st.phase == replica_phase::loading) st.phase = replica_phase::serving;
        if (st.phase == replica_phase::serving && st.ready_seconds < 0)
          st.ready_seconds = std::chrono::duration<double>(self->clock().now() - st.started_at).count();
        report(self);
      },
      [self](engine_unloadable& u) {
        auto& st = self->state;
        st.sup.stop(self, "engine");
        st.engine_ready = false;
        st.phase = replica_phase::failed;
        st.failure = u.why;
        report(self);
      },
      [self](drain_atom) {
        auto& st = self->state;
        if (st.phase == replica_phase::serving) st.phase = replica_phase::draining;
        else if (st.phase == replica_phase::loading || st.phase == replica_phase::starting) stop_engine(self);
        report(self);
        return std::string(to_string(st.phase));
      },
      [self](undrain_atom) {
        // Back to service: a draining replica serves on; a stopped (or failed) one starts its
        // engine again, with fresh KV, and serves once it is ready.
        auto& st = self->state;
        if (st.phase == replica_phase::draining) {
          st.phase = replica_phase::serving;
        } else if (st.phase == replica_phase::stopped || st.phase == replica_phase::failed) {
          st.failure.clear();
          st.sup.start(self, "engine");
          st.phase = replica_phase::loading;
        }
        report(self);
        return std::string(to_string(st.phase));
      },
      [self](router_is& r) {
        self->state.router = r.router;
        report(self);
      },
      [self](chaos_order& o) { on_chaos(self, o); },
      [self](engine_chaos& c) {
        const auto e = self->state.engine();
        if (!e) return;
        if (c.kill) chaos_kill(e);
        else self->send(e, c.order);
      },
      [self](state_atom) { return self->state.status(); },
  };
}

replica_deps replica_deps_for(const config::pool_config& p, engine_identity who, std::shared_ptr<const pool_runtime> rt,
                              std::shared_ptr<fleet_gauges> gauges, std::shared_ptr<actors::loader> loader,
                              caf::timespan cold_start) {
  replica_deps rd;
  rd.who = std::move(who);
  rd.pool = std::move(rt);
  rd.gauges = std::move(gauges);
  rd.loader = std::move(loader);
  rd.engine_restarts = {restart_strategy::one_for_one, p.restart_intensity, std::chrono::milliseconds(p.restart_period_ms)};
  rd.heartbeat = std::chrono::milliseconds(p.heartbeat_ms);
  rd.cold_start = cold_start;
  return rd;
}

}  // namespace kiln::actors
