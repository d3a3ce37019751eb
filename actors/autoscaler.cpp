#include <algorithm>
#include <set>

#include <caf/all.hpp>

#include "actors/autoscale.hpp"
#include "actors/node_supervisor.hpp"
#include "actors/pool_supervisor.hpp"
#include "actors/registry_calls.hpp"
#include "actors/router_shard.hpp"

namespace kiln::actors {

namespace {

using look_atom = caf::atom_constant<caf::atom("look")>;

using stateful = caf::stateful_actor<autoscaler_state>;

void note(stateful* self, const std::string& what, const std::string& why) {
  auto& st = self->state;
  if (st.d.gauges) st.d.gauges->note_scale({st.d.cfg->model, st.d.cfg->version, "autoscale", 0, what, why, self->clock().now()});
}

// The bounds this look: the store's row over the config, a schedule raising the minimum.
config::autoscale_config effective(const autoscaler_state& st, caf::actor_clock::time_point now, int& warm) {
  config::autoscale_config c = st.d.cfg->autoscale;
  warm = c.warm_replicas;
  if (st.stored.has_limits) {
    c.min_replicas = st.stored.limits.min_replicas;
    c.max_replicas = st.stored.limits.max_replicas;
    warm = st.stored.limits.warm_replicas;
  }
  if (!c.schedule.empty())
    c.min_replicas = std::max(c.min_replicas, std::min(c.max_replicas, scheduled_minimum(c, st.d.calendar.unix_at(now))));
  return c;
}

// Asks the store for the pool's row and the version's gate figure (none where no store runs).
void read_store(stateful* self, caf::timespan timeout) {
  auto& st = self->state;
  const caf::actor store = caf::actor_cast<caf::actor>(self->system().registry().get(store_name));
  if (!store) return;
  self->request(store, timeout, scale_settings_call{st.d.cfg->model, st.d.cfg->version, st.d.region})
      .then(
          [self](scale_settings& s) { self->state.stored = std::move(s); },
          [](caf::error&) {});  // the store is away: keep what it said last
}

void act(stateful* self, const pool_view& v) {
  auto& st = self->state;
  const auto now = self->clock().now();
  scale_inputs in;
  in.tokens_in_flight = v.tokens_in_flight;
  st.recent.emplace_back(now, v.tokens_in_flight);
  while (!st.recent.empty() && now - st.recent.front().first > std::chrono::minutes(1)) st.recent.pop_front();
  for (const auto& [t, n] : st.recent) in.recent_peak_tokens = std::max(in.recent_peak_tokens, n);
  // Waiting: admission's queue for this pool, the requests the pool had no room for (read
  // where /metrics reads it; admission publishes it on every change). Requests waiting in an
  // engine for their first step are part of tokens in flight already.
  in.queue_depth = 0;
  if (st.d.gauges)
    for (const auto& [key, n] : st.d.gauges->queues())
      if (std::get<0>(key) == st.d.cfg->model + "@" + st.d.cfg->version) in.queue_depth += static_cast<std::int64_t>(n);
  in.tokens_per_request = v.active_requests > 0 ? static_cast<double>(v.tokens_in_flight) / v.active_requests : 0;
  in.capacity_per_replica = per_replica_capacity(*st.d.cfg, st.stored.gated_tokens_in_flight);
  int warm = 0;
  const config::autoscale_config bounds = effective(st, now, warm);
  in.since_last_removal_s = st.changed_once ? std::chrono::duration<double>(now - st.last_change).count() : 1e18;
  for (const auto& r : v.replicas) {
    if (r.warm) continue;  // held back: not capacity until a scale-up promotes it
    // Drained to leave (by this autoscaler, or one of the pool's before it ended): the pool
    // marks it so from the drain order on, which reaches it before this look's question.
    if (r.leaving) {
      if (r.phase == "stopped" || r.phase == "failed") {
        self->send(st.d.pool, remove_replica{r.replica_id});
        note(self, "remove " + r.replica_id, "drained");
      } else {
        ++in.draining;
      }
      continue;
    }
    if (r.phase == "serving" && r.in_ranking) ++in.serving;
    else if (r.phase == "starting" || r.phase == "loading") ++in.starting;
  }
  self->send(st.d.pool, serving_count{std::max(1, in.serving)});
  const scale_decision d = decide_scale(in, bounds);
  if (d.add == 0) self->send(st.d.pool, warm_order{warm});
  if (d.add > 0) {
    self->send(st.d.pool, scale_up_order{d.add, warm});  // warm replicas promoted first, then refilled
    note(self, "add " + std::to_string(d.add), d.why);
    st.last_change = now;
    st.changed_once = true;
  }
  if (d.remove_one) {
    // The newest serving replica goes (the last added: the original ones keep their caches).
    const replica_view* last = nullptr;
    for (const auto& r : v.replicas)
      if (r.phase == "serving" && !r.warm && !r.leaving &&
          (!last || r.replica_id.size() > last->replica_id.size() ||
           (r.replica_id.size() == last->replica_id.size() && r.replica_id > last->replica_id)))
        last = &r;
    if (last) {
      self->request(st.d.pool, std::chrono::seconds(3), drain_replica{last->replica_id, false, true})
          .then([](std::string&) {}, [](caf::error&) {});  // answered with its phase
      st.last_change = now;
      st.changed_once = true;
      note(self, "drain " + last->replica_id, d.why);
    }
  }
}

}  // namespace

caf::behavior autoscaler(stateful* self, autoscaler_deps deps) {
  auto& st = self->state;
  st.d = std::move(deps);
  const auto every = std::chrono::duration_cast<caf::timespan>(std::chrono::duration<double>(st.d.cfg->autoscale.interval_s));
  read_store(self, every);
  self->delayed_send(self, every, look_atom::value);
  return {
      [self, every](look_atom) {
        self->delayed_send(self, every, look_atom::value);
        read_store(self, every);
        self->request(self->state.d.pool, every, state_atom::value)
            .then([self](pool_view& v) { act(self, v); }, [](caf::error&) {});  // no view: look again later
      },
  };
}

}  // namespace kiln::actors
