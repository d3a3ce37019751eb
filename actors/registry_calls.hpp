#pragma once
// Messages for the registry's tables, answered by the store writer (the one writer).
#include <cstdint>
#include <string>
#include <vector>

#include <caf/allowed_unsafe_message_type.hpp>

#include "config/registry.hpp"

namespace kiln::actors {

/// Registers a version: the files under its weights URI are hashed and must match the
/// hashes given; answers version_registered, 409 (conflict) for other content.
struct register_version_call {
  config::model_version version;
  std::string files_dir;  ///< where its files are on this node ("": weights_uri's local directory)
};
struct version_registered {
  config::model_version version;
  bool created = false;
};
struct versions_call {
  std::string model;
};
struct version_call {
  std::string model;
  std::string version;
};
/// Stores a route; when keep_previous_s > 0 the previous version is kept that long from now.
struct route_write {
  config::model_route route;
  double keep_previous_s = 0;
};
struct rollout_write {
  config::rollout_row row;
};
struct rollouts_call {
  std::string model;
};
struct status_write {
  std::string model;
  std::string version;
  std::string status;
};
/// A gate's load test figures (the version becomes `gated`).
struct load_test_write {
  std::string model;
  std::string version;
  double tokens_per_s = 0;
  double tokens_in_flight = 0;
};

/// Sets a pool's bounds in the `pools` table; answers the row stored.
struct pool_limits_write {
  config::pool_limits limits;
};
/// Every row of the `pools` table.
struct pool_limits_call {};
/// What a pool's autoscaler reads from the store: its bounds (when the table has a row) and
/// its version's gated capacity (0 when not gated or not registered).
struct scale_settings_call {
  std::string model;
  std::string version;
  std::string region;
};
struct scale_settings {
  bool has_limits = false;
  config::pool_limits limits;
  double gated_tokens_in_flight = 0;  ///< the gate's figure for one replica
};

}  // namespace kiln::actors

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kiln::actors::register_version_call)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kiln::actors::version_registered)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kiln::actors::versions_call)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kiln::actors::version_call)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kiln::actors::route_write)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kiln::actors::rollout_write)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kiln::actors::rollouts_call)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kiln::actors::status_write)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kiln::actors::load_test_write)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kiln::actors::pool_limits_write)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kiln::actors::pool_limits_call)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kiln::actors::scale_settings_call)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kiln::actors::scale_settings)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kiln::config::pool_limits)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::vector<kiln::config::pool_limits>)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::vector<kiln::config::model_version>)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::vector<kiln::config::rollout_row>)
