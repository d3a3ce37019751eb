#include <algorithm>
#include <set>

#include <caf/all.hpp>

#include "actors/autoscale.hpp"
#include "actors/pool_supervisor.hpp"
#include "actors/router_shard.hpp"

namespace kiln::actors {

namespace {

using look_atom = caf::atom_constant<caf::atom("look")>;

using stateful = caf::stateful_actor<autoscaler_state>;

void note(stateful* self, const std::string& what, const std::string& why) {
  auto& st = self->state;
  if (st.gauges) st.gauges->note_scale({st.cfg->model, st.cfg->version, "autoscale", 0, what, why, self->clock().now()});
}

double per_replica_capacity(const config::pool_config& p) {
  if (p.autoscale.capacity_tokens > 0) return static_cast<double>(p.autoscale.capacity_tokens);
  return p.replicas > 0 ? static_cast<double>(p.pool_capacity_tokens()) / p.replicas : 0;
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
  if (st.gauges)
    for (const auto& [key, n] : st.gauges->queues())
      if (std::get<0>(key) == st.cfg->model + "@" + st.cfg->version) in.queue_depth += static_cast<std::int64_t>(n);
  in.tokens_per_request = v.active_requests > 0 ? static_cast<double>(v.tokens_in_flight) / v.active_requests : 0;
  in.capacity_per_replica = per_replica_capacity(*st.cfg);
  in.since_last_removal_s = st.changed_once ? std::chrono::duration<double>(now - st.last_change).count() : 1e18;
  for (const auto& r : v.replicas) {
    if (st.draining.count(r.replica_id)) {
      if (r.phase == "stopped" || r.phase == "failed") {
        self->send(st.pool, remove_replica{r.replica_id});
        st.draining.erase(r.replica_id);
        note(self, "remove " + r.replica_id, "drained");
      } else {
        ++in.draining;
      }
      continue;
    }
    if (r.phase == "serving" && r.in_ranking) ++in.serving;
    else if (r.phase == "starting" || r.phase == "loading") ++in.starting;
  }
  self->send(st.pool, serving_count{std::max(1, in.serving)});
  const scale_decision d = decide_scale(in, st.cfg->autoscale);
  if (d.add > 0) {
    self->send(st.pool, scale_up_order{d.add});
    note(self, "add " + std::to_string(d.add), d.why);
    st.last_change = now;
    st.changed_once = true;
  }
  if (d.remove_one) {
    // The newest serving replica goes (the last added: the original ones keep their caches).
    const replica_view* last = nullptr;
    for (const auto& r : v.replicas)
      if (r.phase == "serving" && !st.draining.count(r.replica_id) &&
          (!last || r.replica_id.size() > last->replica_id.size() ||
           (r.replica_id.size() == last->replica_id.size() && r.replica_id > last->replica_id)))
        last = &r;
    if (last) {
      self->request(st.pool, std::chrono::seconds(3), drain_replica{last->replica_id})
          .then([](std::string&) {}, [](caf::error&) {});  // answered with its phase
      st.draining.insert(last->replica_id);
      st.last_change = now;
      st.changed_once = true;
      note(self, "drain " + last->replica_id, d.why);
    }
  }
}

}  // namespace

caf::behavior autoscaler(stateful* self, std::shared_ptr<const config::pool_config> cfg, caf::actor pool,
                         std::shared_ptr<fleet_gauges> gauges) {
  auto& st = self->state;
  st.cfg = std::move(cfg);
  st.pool = std::move(pool);
  st.gauges = std::move(gauges);
  const auto every = std::chrono::duration_cast<caf::timespan>(std::chrono::duration<double>(st.cfg->autoscale.interval_s));
  self->delayed_send(self, every, look_atom::value);
  return {
      [self, every](look_atom) {
        self->delayed_send(self, every, look_atom::value);
        self->request(self->state.pool, every, state_atom::value)
            .then([self](pool_view& v) { act(self, v); }, [](caf::error&) {});  // no view: look again later
      },
  };
}

}  // namespace kiln::actors
