#pragma once
// The global balancer: the front's way into the regions once nodes form a cluster. It sends
// each request to the nearest region (the configured preference) that has a reachable router
// node, round robin over that region's router nodes, and stands as the request's sink so it
// knows whether any token reached the client. When a router node is lost (its directory's
// down message: a killed process at once, a frozen one after the connection timeout) every
// request it held either goes to the next region, if no token of it had arrived, or ends with
// one error event. A request a region refuses before its first token because it is stopping,
// degraded or has nothing serving goes to the next region it has not tried.
//
// Each router node reports its pools every publish period (node_health): a region where a
// model has pools and none serves is passed over for that model while another region serves
// it, and a region none of whose pools serves is shown degraded (drained automatically until
// its pools recover). With no healthy region left, the nearest takes the request and answers
// for its pool (503 with Retry-After).
//
// Why it is safe: a node's tokens and its loss reach the balancer over one connection, in
// order, so once the loss is seen no token of that attempt can follow it; an attempt that had
// shown no token had shown the client nothing.
#include <memory>
#include <string>
#include <vector>

#include <caf/actor.hpp>
#include <caf/atom.hpp>
#include <caf/fwd.hpp>

#include "actors/gauges.hpp"

namespace kiln::cluster {

struct balancer_deps {
  std::vector<std::string> regions;  ///< preference, nearest first
  caf::actor directory;              ///< this node's membership (watched)
  std::shared_ptr<actors::fleet_gauges> gauges;
  caf::timespan publish_every = std::chrono::milliseconds(500);  ///< region gauges
};

caf::actor spawn_balancer(caf::actor_system& sys, balancer_deps deps);

}  // namespace kiln::cluster
