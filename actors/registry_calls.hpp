#pragma once
// Messages for the registry's tables, answered by the store writer (the one writer).
#include <cstdint>
#include <string>
#include <vector>

#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/meta/type_name.hpp>

#include "config/registry.hpp"

// The registry's rows cross nodes: a placement carries its version's registration, and a
// router node apart from its control node makes these calls there (cluster/control_link).
namespace kiln::config {

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, file_hash& x) {
  return f(caf::meta::type_name("file_hash"), x.file, x.sha256);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, model_hashes& x) {
  return f(caf::meta::type_name("model_hashes"), x.files, x.weights_hash, x.tokenizer_hash);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, model_version& x) {
  return f(caf::meta::type_name("model_version"), x.model, x.version, x.weights_uri, x.weights_hash, x.tokenizer_hash,
           x.chat_template, x.chat_template_hash, x.precision, x.gpus_per_replica, x.engine_config,
           x.load_test_tokens_per_s, x.load_test_tokens_in_flight, x.status, x.registered_at, x.files);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, model_route& x) {
  return f(caf::meta::type_name("model_route"), x.model, x.live, x.canary, x.canary_percent, x.shadow, x.shadow_percent,
           x.previous, x.previous_until);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, rollout_row& x) {
  return f(caf::meta::type_name("rollout_row"), x.seq, x.model, x.version, x.stage, x.percent, x.at, x.decision, x.reason,
           x.guard_metrics);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, pool_limits& x) {
  return f(caf::meta::type_name("pool_limits"), x.model, x.version, x.region, x.min_replicas, x.max_replicas,
           x.warm_replicas);
}

}  // namespace kiln::config

namespace kiln::actors {

/// Registers a version whose files the registering node has hashed (off the actor threads,
/// on its own disk: the store may be another node's); the hashes must match those given.
/// Answers version_registered, 400 for a mismatch, 409 (conflict) for other content.
struct register_version_call {
  config::model_version version;
  config::model_hashes hashed;  ///< of the files as the registering node found them
  std::string where;            ///< their directory there, for messages
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

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, register_version_call& x) {
  return f(caf::meta::type_name("register_version_call"), x.version, x.hashed, x.where);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, version_registered& x) {
  return f(caf::meta::type_name("version_registered"), x.version, x.created);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, versions_call& x) {
  return f(caf::meta::type_name("versions_call"), x.model);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, version_call& x) {
  return f(caf::meta::type_name("version_call"), x.model, x.version);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, route_write& x) {
  return f(caf::meta::type_name("route_write"), x.route, x.keep_previous_s);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, rollout_write& x) {
  return f(caf::meta::type_name("rollout_write"), x.row);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, rollouts_call& x) {
  return f(caf::meta::type_name("rollouts_call"), x.model);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, status_write& x) {
  return f(caf::meta::type_name("status_write"), x.model, x.version, x.status);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, load_test_write& x) {
  return f(caf::meta::type_name("load_test_write"), x.model, x.version, x.tokens_per_s, x.tokens_in_flight);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, pool_limits_write& x) {
  return f(caf::meta::type_name("pool_limits_write"), x.limits);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, pool_limits_call&) {
  return f(caf::meta::type_name("pool_limits_call"));
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, scale_settings_call& x) {
  return f(caf::meta::type_name("scale_settings_call"), x.model, x.version, x.region);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, scale_settings& x) {
  return f(caf::meta::type_name("scale_settings"), x.has_limits, x.limits, x.gated_tokens_in_flight);
}

}  // namespace kiln::actors

