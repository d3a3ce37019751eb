#pragma once
// The one writer of the control-plane store. Each call runs on the writer's own thread (the
// store blocks on disk; an actor must not), and its end comes back as a message, which
// answers the caller. A call that changes teams, keys or limits publishes the new tenancy:
// to the board the front authenticates with, and through the node to admission.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/message_handler.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>
#include <optional>

#include "actors/loader.hpp"
#include "actors/messages.hpp"
#include "config/snapshot.hpp"
#include "config/store.hpp"

namespace kiln::config {

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, team_limit& x) {
  return f(caf::meta::type_name("team_limit"), x.model, x.tokens_per_minute, x.burst, x.max_concurrency,
           x.guaranteed_share);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, usage_record& x) {
  return f(caf::meta::type_name("usage_record"), x.seq, x.id_origin, x.id_seq, x.team, x.model, x.version, x.minute,
           x.prompt_tokens, x.cached_tokens, x.output_tokens, x.requests, x.shed);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, usage_row& x) {
  return f(caf::meta::type_name("usage_row"), x.team, x.model, x.version, x.minute, x.prompt_tokens, x.cached_tokens,
           x.output_tokens, x.requests, x.shed);
}

}  // namespace kiln::config

namespace kiln::actors {

/// Admin: replace one limit of a team (model, tokens_per_minute, burst, max_concurrency,
/// guaranteed_share); answers the team's limits.
struct put_limit {
  std::string team;
  config::team_limit limit;
};
struct get_limits {
  std::string team;
};
/// Admin: a new team with a first key, shown once.
struct create_team {
  std::string team;
  std::string name;
  engine::priority max_priority = engine::priority::interactive;
};
struct revoke_key {
  std::string team;
  std::string key_id;
};
struct usage_query {
  std::string team;
  std::string model;  ///< "": all
  std::int64_t from_minute = 0;
  std::int64_t to_minute = 0;
};
/// A meter's records from_seq..through_seq of a ledger, for the usage table: applied once,
/// each request once (config::store::fold_usage); answers the ledger's watermark after it.
struct usage_fold {
  std::vector<config::usage_record> records;
  std::uint64_t through_seq = 0;  ///< the last usage record these rows include
  std::uint64_t from_seq = 0;     ///< the first
  std::string ledger;             ///< the metering node ("": the store's own node)
};
/// A new team's key, in clear this once.
struct team_created {
  std::string team;
  std::string key;
  std::string key_id;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, team_created& x) {
  return f(caf::meta::type_name("team_created"), x.team, x.key, x.key_id);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, put_limit& x) {
  return f(caf::meta::type_name("put_limit"), x.team, x.limit);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, get_limits& x) {
  return f(caf::meta::type_name("get_limits"), x.team);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, create_team& x) {
  return f(caf::meta::type_name("create_team"), x.team, x.name, x.max_priority);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, revoke_key& x) {
  return f(caf::meta::type_name("revoke_key"), x.team, x.key_id);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, usage_query& x) {
  return f(caf::meta::type_name("usage_query"), x.team, x.model, x.from_minute, x.to_minute);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, usage_fold& x) {
  return f(caf::meta::type_name("usage_fold"), x.records, x.through_seq, x.from_seq, x.ledger);
}

struct store_writer_state {
  std::shared_ptr<config::store> db;
  /// A control node's: routes and the versions they name, for its configuration snapshots.
  std::shared_ptr<config::registry_board> registry;
  std::shared_ptr<loader> thread;                  ///< the writer's own thread
  std::shared_ptr<config::tenancy_board> board;
  caf::actor node;                                 ///< forwards tenancy updates to admission
  std::uint64_t next_ticket = 0;
  std::unordered_map<std::uint64_t, std::function<void()>> pending;  ///< what runs when a call ends
  static inline const char* name = "kiln.store";
};

using stored_atom = caf::atom_constant<caf::atom("stored")>;

/// Runs `op` on the writer's thread; `then` runs in the actor with what it returned.
template <class R>
void on_disk(caf::stateful_actor<store_writer_state>* self, std::function<R(config::store&)> op,
             std::function<void(R&)> then) {
  auto& st = self->state;
  const std::uint64_t ticket = ++st.next_ticket;
  auto result = std::make_shared<std::optional<R>>();
  st.pending[ticket] = [result, then = std::move(then)] { then(**result); };
  st.thread->run([db = st.db, op = std::move(op), result, handle = caf::actor_cast<caf::actor>(self), ticket] {
    *result = op(*db);
    caf::anon_send(handle, stored_atom::value, ticket);  // the message orders the write before the read
  });
}

/// The registry's calls (actors/registry_calls.cpp): versions, routes, rollout rows.
caf::message_handler registry_calls(caf::stateful_actor<store_writer_state>* self);
/// The `pools` table's calls (actors/pool_limits_calls.cpp): bounds, and what autoscalers read.
caf::message_handler pool_limits_calls(caf::stateful_actor<store_writer_state>* self);

/// Reads the stored routes and the versions they name onto the registry board (none: nothing).
void refresh_registry(caf::stateful_actor<store_writer_state>* self);

/// `registry`: a control node's registry board (null elsewhere).
caf::behavior store_writer(caf::stateful_actor<store_writer_state>* self, std::shared_ptr<config::store> db,
                           std::shared_ptr<config::tenancy_board> board, caf::actor node,
                           std::shared_ptr<config::registry_board> registry);

}  // namespace kiln::actors

