#pragma once
// Messages between kiln's actors. Each type has an inspect() so it can cross nodes later.
//
// A request's path: the front sends a `request` to admission, admission to the router shard
// of its model@version, which owns it and sends it to an engine. The engine streams
// `stream_tokens` to the request's sink and reports `first_token` (before those tokens
// leave), `job_done` and `job_failed` to the owner. The owner alone ends the request at the
// sink, with one `stream_end` or `stream_error`.
//
// Why the owner may retry safely: an owner that has not heard `first_token` knows no token of
// that attempt reached the sink, because on one node a send enqueues at once and the engine
// sends `first_token` first; and an engine's down message follows everything it sent. Across
// nodes these two paths are not ordered against each other: a remote engine will need the
// sink to fence attempts (or the owner to see tokens acknowledged) before retrying.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <caf/actor.hpp>
#include <caf/atom.hpp>
#include <caf/meta/type_name.hpp>

#include "actors/request.hpp"

namespace kiln::actors {

using step_atom = caf::atom_constant<caf::atom("step")>;
using coast_atom = caf::atom_constant<caf::atom("coast")>;
using tick_atom = caf::atom_constant<caf::atom("tick")>;
using stats_atom = caf::atom_constant<caf::atom("stats")>;
using drain_atom = caf::atom_constant<caf::atom("drain")>;
using undrain_atom = caf::atom_constant<caf::atom("undrain")>;
using state_atom = caf::atom_constant<caf::atom("state")>;
using loaded_atom = caf::atom_constant<caf::atom("loaded")>;
using recover_atom = caf::atom_constant<caf::atom("recover")>;
using thaw_atom = caf::atom_constant<caf::atom("thaw")>;
using unslow_atom = caf::atom_constant<caf::atom("unslow")>;
using warm_atom = caf::atom_constant<caf::atom("warm")>;

// --- engine -> sink, owner -> sink ---

/// Tokens of one step for one request, in order. The first for a request also carries its
/// prompt and cached token counts (-1 on later ones).
struct stream_tokens {
  request_id id;
  std::string text;
  std::int32_t tokens = 0;
  std::int32_t prompt_tokens = -1;
  std::int32_t cached_tokens = -1;
  std::vector<engine::token_logprob> logprobs;         ///< these tokens' (when the request asked)
  std::vector<engine::token_logprob> prompt_logprobs;  ///< the prompt's, with the first tokens (when asked)
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, stream_tokens& x) {
  return f(caf::meta::type_name("stream_tokens"), x.id, x.text, x.tokens, x.prompt_tokens, x.cached_tokens,
           x.logprobs, x.prompt_logprobs);
}

/// One step's tokens for every request of one sink (a front serving many streams): one
/// message per step per sink rather than one per request.
struct stream_batch {
  std::vector<stream_tokens> items;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, stream_batch& x) {
  return f(caf::meta::type_name("stream_batch"), x.items);
}

/// Terminal event of a request that completed. Every token was sent before it.
struct stream_end {
  request_id id;
  std::string finish_reason;
  std::int32_t prompt_tokens = 0;
  std::int32_t completion_tokens = 0;
  std::int32_t cached_tokens = 0;
  std::string model_version;
  std::string region;
  std::string replica_id;
  double engine_ttft_ms = 0;  ///< arrival at the engine to the first token leaving it
  std::int32_t attempts = 1;  ///< replicas it was sent to (2 or 3 after retries)
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, stream_end& x) {
  return f(caf::meta::type_name("stream_end"), x.id, x.finish_reason, x.prompt_tokens, x.completion_tokens,
           x.cached_tokens, x.model_version, x.region, x.replica_id, x.engine_ttft_ms, x.attempts);
}

/// Terminal event of a request that failed.
struct stream_error {
  request_id id;
  errc code = errc::internal;
  std::string message;
  std::string param;               ///< the request field at fault, if any
  std::int32_t retry_after_s = 0;  ///< > 0: when the client may try again
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, stream_error& x) {
  return f(caf::meta::type_name("stream_error"), x.id, x.code, x.message, x.param, x.retry_after_s);
}

// --- engine -> owner, owner -> engine ---

/// The request's first tokens are about to leave for the sink.
struct first_token {
  request_id id;
  std::uint8_t attempt = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, first_token& x) {
  return f(caf::meta::type_name("first_token"), x.id, x.attempt);
}

/// The request ended in the engine (finish cancelled: its client went away).
struct job_done {
  request_id id;
  std::uint8_t attempt = 0;
  engine::finish_reason finish = engine::finish_reason::none;
  engine::usage usage;
  std::string replica_id;
  double engine_ttft_ms = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, job_done& x) {
  return f(caf::meta::type_name("job_done"), x.id, x.attempt, x.finish, x.usage, x.replica_id, x.engine_ttft_ms);
}

/// The engine could not take or finish the request; `usage` is what it had produced.
struct job_failed {
  request_id id;
  std::uint8_t attempt = 0;
  errc code = errc::internal;
  std::string message;
  engine::usage usage;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, job_failed& x) {
  return f(caf::meta::type_name("job_failed"), x.id, x.attempt, x.code, x.message, x.usage);
}

/// The owner's word to admission that a request has ended, however it ended: its slot is
/// free and what it did not use goes back to its team's bucket. `usage_known` false: its
/// engine died with the count (the charge then stands).
struct request_released {
  request_id id;
  engine::usage usage;
  bool usage_known = true;
  bool completed = false;
  std::string version;
  std::string team;
  std::string model;
  bool failed = false;  ///< kiln ended it with an error (not the client going away)
  double ttft_s = -1;   ///< from the router taking it to its first token; -1: none
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, request_released& x) {
  return f(caf::meta::type_name("request_released"), x.id, x.usage, x.usage_known, x.completed, x.version, x.team,
           x.model, x.failed, x.ttft_s);
}

/// Admission's word to the sink before the request runs: the team's token limit for the
/// model as it stands (the x-ratelimit-* headers). limit 0: none.
struct rate_limit_info {
  request_id id;
  std::int64_t limit_tokens = 0;
  std::int64_t remaining_tokens = 0;
  double reset_s = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, rate_limit_info& x) {
  return f(caf::meta::type_name("rate_limit_info"), x.id, x.limit_tokens, x.remaining_tokens, x.reset_s);
}

/// The owner gave up on a request (deadline): the engine drops its sequence.
struct cancel_job {
  request_id id;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, cancel_job& x) {
  return f(caf::meta::type_name("cancel_job"), x.id);
}

// --- replicas, heartbeats ---

/// A replica's lifecycle. Only a serving replica takes traffic.
enum class replica_phase : std::uint8_t { starting, loading, serving, draining, stopped, failed };
std::string_view to_string(replica_phase p);

/// An engine's figures, as its replica asks for them every second.
struct engine_load {
  std::int32_t waiting = 0;
  std::int32_t running = 0;
  std::int64_t tokens_in_flight = 0;
  std::int64_t received_tokens = 0;      ///< running sum of request tokens it was sent
  std::int64_t prompt_tokens_total = 0;  ///< prompt tokens of the requests it admitted
  std::int64_t cached_tokens_total = 0;  ///< of those, found in its prefix cache
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, engine_load& x) {
  return f(caf::meta::type_name("engine_load"), x.waiting, x.running, x.tokens_in_flight, x.received_tokens,
           x.prompt_tokens_total, x.cached_tokens_total);
}

/// A replica's heartbeat to its router, every second while it lives (and at once when its
/// phase or engine changes). `engine` is where the router sends requests while serving.
struct replica_status {
  std::string replica_id;
  replica_phase phase = replica_phase::starting;
  caf::actor engine;
  engine_load load;
  std::uint32_t restarts = 0;  ///< engine restarts so far
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, replica_status& x) {
  return f(caf::meta::type_name("replica_status"), x.replica_id, x.phase, x.engine, x.load, x.restarts);
}

// --- chaos ---

/// kill: an untrappable exit, as a crash; freeze: stop answering for a while; slow: step
/// time x factor for a while; fail: the engine's device fails (every request it holds gets
/// engine_failed and the engine ends, as on a GPU error).
enum class chaos_action : std::uint8_t { kill, freeze, slow, fail };
std::string_view to_string(chaos_action a);
/// The action a name (as to_string writes it) stands for; none for any other name.
std::optional<chaos_action> chaos_action_from(std::string_view name);

/// Freeze: stop answering for `seconds`; slow: step time x `factor` for `seconds`; fail.
/// (Kill is an exit message, not this.)
struct chaos_order {
  chaos_action action = chaos_action::freeze;
  double seconds = 5;
  double factor = 10;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, chaos_order& x) {
  return f(caf::meta::type_name("chaos_order"), x.action, x.seconds, x.factor);
}

}  // namespace kiln::actors
