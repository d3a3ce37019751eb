#include "cluster/wire.hpp"

#include <chrono>

#include <caf/actor_system_config.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/io/middleman.hpp>

#include "actors/batch_calls.hpp"
#include "actors/messages.hpp"
#include "actors/region_limits.hpp"
#include "actors/registry_calls.hpp"
#include "actors/store_writer.hpp"
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
  // A router node's store calls on its control node (cluster/control_link) and their answers.
  cfg.add_message_type<actors::usage_fold>("kiln::usage_fold");
  cfg.add_message_type<config::usage_row>("kiln::usage_row");
  cfg.add_message_type<std::vector<config::usage_row>>("kiln::usage_rows");
  cfg.add_message_type<actors::usage_query>("kiln::usage_query");
  cfg.add_message_type<actors::put_limit>("kiln::put_limit");
  cfg.add_message_type<actors::get_limits>("kiln::get_limits");
  cfg.add_message_type<config::team_limit>("kiln::team_limit");
  cfg.add_message_type<std::vector<config::team_limit>>("kiln::team_limits");
  cfg.add_message_type<actors::create_team>("kiln::create_team");
  cfg.add_message_type<actors::team_created>("kiln::team_created");
  cfg.add_message_type<actors::revoke_key>("kiln::revoke_key");
  cfg.add_message_type<actors::region_use_report>("kiln::region_use_report");
  cfg.add_message_type<config::region_use_row>("kiln::region_use_row");
  cfg.add_message_type<actors::region_shares_update>("kiln::region_shares_update");
  cfg.add_message_type<actors::register_version_call>("kiln::register_version_call");
  cfg.add_message_type<actors::version_registered>("kiln::version_registered");
  cfg.add_message_type<actors::versions_call>("kiln::versions_call");
  cfg.add_message_type<actors::version_call>("kiln::version_call");
  cfg.add_message_type<config::model_version>("kiln::model_version");
  cfg.add_message_type<std::vector<config::model_version>>("kiln::model_versions");
  cfg.add_message_type<actors::route_write>("kiln::route_write");
  cfg.add_message_type<actors::rollout_write>("kiln::rollout_write");
  cfg.add_message_type<actors::rollouts_call>("kiln::rollouts_call");
  cfg.add_message_type<config::rollout_row>("kiln::rollout_row");
  cfg.add_message_type<std::vector<config::rollout_row>>("kiln::rollout_rows");
  cfg.add_message_type<actors::status_write>("kiln::status_write");
  cfg.add_message_type<actors::load_test_write>("kiln::load_test_write");
  cfg.add_message_type<actors::pool_limits_write>("kiln::pool_limits_write");
  cfg.add_message_type<actors::pool_limits_call>("kiln::pool_limits_call");
  cfg.add_message_type<config::pool_limits>("kiln::pool_limits");
  cfg.add_message_type<std::vector<config::pool_limits>>("kiln::pool_limits_rows");
  cfg.add_message_type<actors::scale_settings_call>("kiln::scale_settings_call");
  cfg.add_message_type<actors::scale_settings>("kiln::scale_settings");
  cfg.add_message_type<config::file_row>("kiln::file_row");
  cfg.add_message_type<std::vector<config::file_row>>("kiln::file_rows");
  cfg.add_message_type<config::batch_row>("kiln::batch_row");
  cfg.add_message_type<std::vector<config::batch_row>>("kiln::batch_rows");
  cfg.add_message_type<actors::file_write>("kiln::file_write");
  cfg.add_message_type<actors::file_call>("kiln::file_call");
  cfg.add_message_type<actors::files_call>("kiln::files_call");
  cfg.add_message_type<actors::file_delete>("kiln::file_delete");
  cfg.add_message_type<actors::batch_write>("kiln::batch_write");
  cfg.add_message_type<actors::batch_call>("kiln::batch_call");
  cfg.add_message_type<actors::batches_call>("kiln::batches_call");
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
