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
  const double capacity = in.serving * in.capacity_per_replica;
  const double load = capacity > 0 ? static_cast<double>(in.tokens_in_flight) / capacity : 1e9;
  const bool hot = load > c.scale_up_at;
  const bool queued = in.queue_depth > c.queue_trigger;
  if (hot || queued) {
    // Enough replicas to bring the load back to the threshold; the queue asks for one more.
    const int target = static_cast<int>(
        std::ceil(static_cast<double>(in.tokens_in_flight) / (c.scale_up_at * in.capacity_per_replica)));
    const int want = std::max(target - total, queued ? in.serving + 1 - total : 0);
    d.add = std::min(room, std::max(0, want));
    if (d.add > 0) {
      std::snprintf(buf, sizeof buf, "%s: %lld tokens in flight on %d serving (%.0f%% of capacity), %lld queued",
                    hot ? "load" : "queue", static_cast<long long>(in.tokens_in_flight), in.serving, 100 * load,
                    static_cast<long long>(in.queue_depth));
      d.why = buf;
    }
    return d;
  }
  // One fewer only when nothing is starting or draining, the last removal is a period ago,
  // nothing waits, and the others would carry the load below scale_down_at.
  if (in.starting > 0 || in.draining > 0 || in.serving <= c.min_replicas || in.queue_depth > 0 ||
      in.since_last_removal_s < c.down_every_s)
    return d;
  const double rest = (in.serving - 1) * in.capacity_per_replica;
  if (static_cast<double>(in.tokens_in_flight) < c.scale_down_at * rest) {
    d.remove_one = true;
    std::snprintf(buf, sizeof buf, "idle: %lld tokens in flight would be %.0f%% of %d replicas",
                  static_cast<long long>(in.tokens_in_flight), 100 * in.tokens_in_flight / rest, in.serving - 1);
    d.why = buf;
  }
  return d;
}

}  // namespace kiln::actors
