#pragma once
// Messages between kiln's actors. Each type has an inspect() so it can cross nodes later.
#include <cstdint>
#include <string>
#include <vector>

#include <caf/actor.hpp>
#include <caf/atom.hpp>
#include <caf/meta/type_name.hpp>

namespace kiln::actors {

using step_atom = caf::atom_constant<caf::atom("step")>;
using tick_atom = caf::atom_constant<caf::atom("tick")>;
using stats_atom = caf::atom_constant<caf::atom("stats")>;

/// One message of a conversation, as the client sent it.
struct chat_turn {
  std::string role;
  std::string content;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, chat_turn& x) {
  return f(caf::meta::type_name("chat_turn"), x.role, x.content);
}

/// One chat completion on its way front -> admission -> router -> replica -> engine.
struct chat_job {
  std::uint64_t id = 0;
  std::string api_key;          ///< as the client sent it; admission resolves it
  std::string team;             ///< set by admission
  std::string model;
  std::uint8_t priority = 1;    ///< engine::priority
  std::string conversation_id;
  std::vector<chat_turn> messages;
  std::vector<std::int32_t> prompt;  ///< set by admission: the pool's template and tokenizer
  std::int32_t max_tokens = 0;  ///< 0: the pool's default
  double temperature = 1.0;
  std::int32_t top_k = 0;
  double top_p = 1.0;
  bool has_seed = false;
  std::uint64_t seed = 0;
  std::vector<std::string> stop;
  caf::actor sink;              ///< receives stream_tokens, then stream_end or stream_error
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, chat_job& x) {
  return f(caf::meta::type_name("chat_job"), x.id, x.api_key, x.team, x.model, x.priority,
           x.conversation_id, x.messages, x.prompt, x.max_tokens, x.temperature, x.top_k, x.top_p,
           x.has_seed, x.seed, x.stop, x.sink);
}

/// Tokens of one step for one request, in order.
struct stream_tokens {
  std::uint64_t id = 0;
  std::string text;
  std::int32_t tokens = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, stream_tokens& x) {
  return f(caf::meta::type_name("stream_tokens"), x.id, x.text, x.tokens);
}

/// Terminal event of a request that completed.
struct stream_end {
  std::uint64_t id = 0;
  std::string text;  ///< tokens of the final step, if any
  std::int32_t tokens = 0;
  std::string finish_reason;
  std::int32_t prompt_tokens = 0;
  std::int32_t completion_tokens = 0;
  std::int32_t cached_tokens = 0;
  std::string team;
  std::string model_version;
  std::string region;
  std::string replica_id;
  double engine_ttft_ms = 0;  ///< arrival at the engine to the first token leaving it
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, stream_end& x) {
  return f(caf::meta::type_name("stream_end"), x.id, x.text, x.tokens, x.finish_reason,
           x.prompt_tokens, x.completion_tokens, x.cached_tokens, x.team, x.model_version,
           x.region, x.replica_id, x.engine_ttft_ms);
}

/// Terminal event of a request that failed; status is the HTTP status to answer with.
struct stream_error {
  std::uint64_t id = 0;
  std::int32_t status = 500;
  std::string type;
  std::string message;
  std::string param;
  std::string code;
  std::string team;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, stream_error& x) {
  return f(caf::meta::type_name("stream_error"), x.id, x.status, x.type, x.message, x.param,
           x.code, x.team);
}

/// A replica's load, sent to its router every second. `forwarded_tokens` is the running sum
/// of job tokens (prompt + max_tokens) the replica had passed to its engine when it asked for
/// these figures, so the router can tell which of its jobs they already include.
struct load_report {
  std::string replica_id;
  std::int32_t queue_depth = 0;
  std::int32_t running = 0;
  std::int64_t tokens_in_flight = 0;
  std::int64_t forwarded_tokens = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, load_report& x) {
  return f(caf::meta::type_name("load_report"), x.replica_id, x.queue_depth, x.running,
           x.tokens_in_flight, x.forwarded_tokens);
}

/// Tokens a job adds to a replica's load: prompt plus the output it may produce.
inline std::int64_t job_tokens(const chat_job& j) {
  return static_cast<std::int64_t>(j.prompt.size()) + j.max_tokens;
}

}  // namespace kiln::actors
