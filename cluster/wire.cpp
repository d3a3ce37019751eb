#include "cluster/wire.hpp"

#include <chrono>

#include <caf/actor_system_config.hpp>
#include <caf/io/middleman.hpp>

#include "actors/messages.hpp"
#include "actors/replica.hpp"
#include "actors/worker_host.hpp"

namespace kiln::cluster {

void add_wire_types(caf::actor_system_config& cfg) {
  // Front <-> region: the request and everything its sink receives.
  cfg.add_message_type<actors::request>("kiln::request");
  cfg.add_message_type<actors::stream_tokens>("kiln::stream_tokens");
  cfg.add_message_type<actors::stream_batch>("kiln::stream_batch");
  cfg.add_message_type<actors::stream_end>("kiln::stream_end");
  cfg.add_message_type<actors::stream_error>("kiln::stream_error");
  cfg.add_message_type<actors::rate_limit_info>("kiln::rate_limit_info");
  // Router <-> replicas and engines on worker nodes.
  cfg.add_message_type<actors::host_replica>("kiln::host_replica");
  cfg.add_message_type<actors::unhost_replica>("kiln::unhost_replica");
  cfg.add_message_type<actors::replica_status>("kiln::replica_status");
  cfg.add_message_type<actors::engine_load>("kiln::engine_load");
  cfg.add_message_type<actors::router_is>("kiln::router_is");
  cfg.add_message_type<actors::chaos_order>("kiln::chaos_order");
  cfg.add_message_type<actors::engine_chaos>("kiln::engine_chaos");
  cfg.add_message_type<actors::first_token>("kiln::first_token");
  cfg.add_message_type<actors::job_done>("kiln::job_done");
  cfg.add_message_type<actors::job_failed>("kiln::job_failed");
  cfg.add_message_type<actors::cancel_job>("kiln::cancel_job");
  // Membership.
  cfg.add_message_type<member_info>("kiln::member_info");
  cfg.add_message_type<node_health>("kiln::node_health");
}

void set_heartbeats(caf::actor_system_config& cfg, int heartbeat_ms, int connection_timeout_ms) {
  cfg.load<caf::io::middleman>();
  cfg.set("middleman.heartbeat-interval", caf::timespan{std::chrono::milliseconds(heartbeat_ms)});
  cfg.set("middleman.connection-timeout", caf::timespan{std::chrono::milliseconds(connection_timeout_ms)});
}

}  // namespace kiln::cluster
