#include "actors/autoscale.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace kiln::actors {

scale_decision decide_scale(const scale_inputs& in, const config::autoscale_config& c) {
  scale_decision d;
  const int total = in.serving + in.starting;
  const int room = std::max(0, c.max_replicas - total);
  char buf[160];
  if (total < c.min_replicas) {
    d.add = std::min(room, c.min_replicas - total);
    std::snprintf(buf, sizeof buf, "below min_replicas %d", c.min_replicas);
    d.why = buf;
    return d;
  }
  if (in.capacity_per_replica <= 0) return d;
  // The demand: what runs, and what waits once it runs.
  const double demand = static_cast<double>(in.tokens_in_flight) + static_cast<double>(in.queue_depth) * in.tokens_per_request;
  const double capacity = in.serving * in.capacity_per_replica;
  const double load = capacity > 0 ? demand / capacity : 1e9;
  const bool hot = load > c.scale_up_at;
  const bool queued = in.queue_depth > c.queue_trigger;
  if (hot || queued) {
    // Enough replicas (those starting included) to bring the demand back to the threshold;
    // a queue past its trigger asks for at least one more than serve now.
    const int target = static_cast<int>(std::ceil(demand / (c.scale_up_at * in.capacity_per_replica)));
    const int want = std::max(target - total, queued ? in.serving + 1 - total : 0);
    d.add = std::min(room, std::max(0, want));
    if (d.add > 0) {
      std::snprintf(buf, sizeof buf, "%s: %lld tokens in flight and %lld requests queued on %d serving (%.0f%% of capacity)",
                    hot ? "load" : "queue", static_cast<long long>(in.tokens_in_flight),
                    static_cast<long long>(in.queue_depth), in.serving, 100 * load);
      d.why = buf;
    }
    return d;
  }
  // One fewer only when nothing is starting or draining, the last change is a period ago,
  // nothing waits, and the others would carry the load below scale_down_at.
  if (in.starting > 0 || in.draining > 0 || in.serving <= c.min_replicas || in.queue_depth > 0 ||
      in.since_last_removal_s < c.down_every_s)
    return d;
  // The busiest moment of the last minute must fit too: a lull between bursts is not idle.
  const double busy = static_cast<double>(std::max(in.tokens_in_flight, in.recent_peak_tokens));
  const double rest = (in.serving - 1) * in.capacity_per_replica;
  if (busy < c.scale_down_at * rest) {
    d.remove_one = true;
    std::snprintf(buf, sizeof buf, "idle: at most %.0f tokens in flight in the last minute would be %.0f%% of %d replicas",
                  busy, 100 * busy / rest, in.serving - 1);
    d.why = buf;
  }
  return d;
}

double per_replica_capacity(const config::pool_config& p, double gated) {
  if (p.autoscale.capacity_tokens > 0) return static_cast<double>(p.autoscale.capacity_tokens);
  if (gated > 0) return gated;
  return p.replicas > 0 ? static_cast<double>(p.pool_capacity_tokens()) / p.replicas : 0;
}

int scheduled_minimum(const config::autoscale_config& c, std::int64_t unix_s) {
  int most = 0;
  for (const auto& e : c.schedule) {
    // Active when a named time lies in [now - hold, now + lead].
    const auto lead = static_cast<std::int64_t>(e.lead_s);
    const auto hold = static_cast<std::int64_t>(e.hold_s);
    if (e.when.last_in(unix_s - hold, unix_s + lead) >= 0) most = std::max(most, e.min_replicas);
  }
  return most;
}

}  // namespace kiln::actors
