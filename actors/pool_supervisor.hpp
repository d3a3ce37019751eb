#pragma once
// One pool (model@version) in a region: it loads what the pool serves with (tokenizer, chat
// template, weights) off the scheduler's threads, then supervises its router shard and its
// replicas one_for_one. A restarted router gets the replica set, and the replicas the new
// router; a restarted replica is announced to the router. Past the restart intensity the pool
// stops its children and turns `degraded` (admission answers 503 with Retry-After) until the
// period has passed; then it starts them all again.
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/stateful_actor.hpp>

#include "actors/autoscale.hpp"
#include "actors/gauges.hpp"
#include "actors/loader.hpp"
#include "actors/pool_runtime.hpp"
#include "actors/router_shard.hpp"
#include "actors/supervisor.hpp"
#include "config/config.hpp"
#include "config/registry.hpp"

namespace kiln::actors {

enum class pool_status : std::uint8_t { loading, serving, degraded, failed };
std::string_view to_string(pool_status s);

/// A pool's status for admission: where its router is and what it serves with.
struct pool_update {
  std::string model;
  std::string version;
  pool_status status = pool_status::loading;
  caf::actor router;
  std::shared_ptr<const pool_runtime> runtime;
  std::string failure;                 ///< failed: why
  int serving_replicas = -1;           ///< as its autoscaler counts them; -1: as configured
  caf::actor_clock::time_point retry_at;  ///< degraded: when its replicas start again
};

/// Admin: drain a replica, or return one draining or stopped to service (`resume`); answers
/// its phase. The autoscaler's drains `leave`: such a replica leaves the pool once stopped, and
/// cannot be resumed.
struct drain_replica {
  std::string replica_id;
  bool resume = false;
  bool leave = false;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, drain_replica& x) {
  return f(caf::meta::type_name("drain_replica"), x.replica_id, x.resume, x.leave);
}

/// Admin, remote pools: add an upstream (a new replica serving from it), remove one (its
/// replica drains, then leaves) or list them. Answers "replica_id url" lines.
enum class upstream_op : std::uint8_t { list, add, remove };
struct upstream_change {
  std::string model;
  std::string version;
  upstream_op op = upstream_op::list;
  std::string url;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, upstream_change& x) {
  return f(caf::meta::type_name("upstream_change"), x.model, x.version, x.op, x.url);
}

enum class chaos_target : std::uint8_t { engine, replica, router, autoscaler, store };
std::string_view to_string(chaos_target t);
/// The target a name (as to_string writes it) stands for; none for any other name.
std::optional<chaos_target> chaos_target_from(std::string_view name);

/// Admin: chaos at one actor. `id` is a replica id (engine, replica), model@version (router,
/// autoscaler) or "store" (the store writer); "random" lets the node choose. Autoscalers and
/// the store writer can only be killed (their supervisors start them again).
struct chaos_request {
  chaos_target target = chaos_target::replica;
  std::string id;
  chaos_action action = chaos_action::kill;
  chaos_order order;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, chaos_request& x) {
  return f(caf::meta::type_name("chaos_request"), x.target, x.id, x.action, x.order);
}

struct pool_deps {
  std::shared_ptr<const config::pool_config> cfg;
  std::string region;
  std::shared_ptr<fleet_gauges> gauges;
  std::shared_ptr<actors::loader> loader;
  caf::actor node;  ///< hears every pool_update
  calendar_anchor calendar;  ///< for its autoscaler's schedule
  /// The node has no worker role: each replica is a stand-in for one hosted on a worker node
  /// of the region (remote_replica.hpp).
  bool remote_replicas = false;
  /// A version registered at run time: its registration, for the worker nodes (0 or 1).
  std::vector<config::model_version> registered;
};

/// "<model>-<version>-r<i>"
std::string replica_id_of(const config::pool_config& p, int i);

struct pool_state {
  pool_deps d;
  pool_status status = pool_status::loading;
  std::shared_ptr<const pool_runtime> runtime;
  supervisor sup;
  std::vector<std::string> replica_ids;
  std::vector<std::string> warm_ids;  ///< of replica_ids: loaded, held back from routing
  std::set<std::string> leaving;      ///< of replica_ids: drained to leave (the autoscaler's)
  int warm_target = 0;                ///< as the autoscaler last asked
  int next_replica = 0;  ///< the number the next replica's id gets
  /// Remote pools: the upstream each replica calls, by replica id, and the next replica's.
  std::map<std::string, std::string> upstream_of;
  std::vector<std::string> first_upstreams;  ///< what its replicas start with: the store's list, else the config's
  int serving_replicas = -1;  ///< from the autoscaler; -1: none
  /// The pool's autoscaler (started again if it dies); shared with the functor that stops it
  /// when the pool ends.
  std::shared_ptr<caf::actor> scaler = std::make_shared<caf::actor>();
  caf::actor_clock::time_point retry_at;

  caf::actor router() const { return sup.child("router"); }
  bool is_warm(const std::string& id) const;
  pool_update update() const;
  void publish() const;
  /// What the pool can say of itself without its router.
  pool_view own_view(caf::actor_clock::time_point now) const;
  static inline const char* name = "kiln.pool";
};

caf::behavior pool_supervisor(caf::stateful_actor<pool_state>* self, pool_deps deps);

}  // namespace kiln::actors

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kiln::actors::pool_update)
