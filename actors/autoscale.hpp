#pragma once
// The autoscaler's decision as a plain function: grow when tokens in flight pass the share of
// the serving replicas' capacity (or the queue passes its trigger), shrink by one drained
// replica at most once per period when the rest would stay well below it. Only serving
// replicas count as capacity; replicas already starting count against what is added.
#include <cstdint>
#include <string>

#include "config/config.hpp"

namespace kiln::actors {

struct scale_inputs {
  int serving = 0;   ///< replicas serving: the capacity that counts
  int starting = 0;  ///< added and not serving yet (cold start)
  int draining = 0;  ///< on their way out
  std::int64_t tokens_in_flight = 0;
  std::int64_t queue_depth = 0;        ///< requests waiting in the engines
  double capacity_per_replica = 0;     ///< tokens in flight one replica carries (the gate's figure)
  double since_last_removal_s = 1e18;  ///< since the autoscaler last removed a replica
};

struct scale_decision {
  int add = 0;              ///< replicas to start
  bool remove_one = false;  ///< drain one replica, removed once it has drained
  std::string why;          ///< for the log and the report; "" when nothing changes
};

scale_decision decide_scale(const scale_inputs& in, const config::autoscale_config& c);

}  // namespace kiln::actors
