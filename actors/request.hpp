#pragma once
// The one request vocabulary of kiln's actors: a request's id, the request itself as it
// travels front -> admission -> router (its owner) -> engine, and the one internal error enum.
// Only net/ turns an errc into an HTTP status, an OpenAI error type and code, and headers.
#include <atomic>
#include <cstdint>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <caf/actor.hpp>
#include <caf/error.hpp>
#include <caf/none.hpp>
#include <caf/meta/load_callback.hpp>
#include <caf/meta/type_name.hpp>

#include "engine/token_list.hpp"
#include "engine/types.hpp"

namespace kiln::actors {

/// Unique across nodes and restarts: a random origin drawn once per process, and a counter.
struct request_id {
  std::uint64_t origin = 0;
  std::uint64_t seq = 0;
  friend bool operator==(const request_id& a, const request_id& b) { return a.origin == b.origin && a.seq == b.seq; }
  friend bool operator!=(const request_id& a, const request_id& b) { return !(a == b); }
  friend bool operator<(const request_id& a, const request_id& b) {
    return a.origin != b.origin ? a.origin < b.origin : a.seq < b.seq;
  }
  /// 32 hex digits.
  std::string str() const;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, request_id& x) {
  return f(caf::meta::type_name("request_id"), x.origin, x.seq);
}

struct request_id_hash {
  std::size_t operator()(const request_id& id) const noexcept {
    return static_cast<std::size_t>(id.origin ^ (id.seq * 0x9E3779B97F4A7C15ull));
  }
};

/// Hands out request ids; thread-safe (the front's I/O threads share one).
class request_ids {
 public:
  request_ids();  ///< draws the origin from the OS's random source
  explicit request_ids(std::uint64_t origin) : origin_(origin) {}
  request_id next() { return {origin_, ++seq_}; }
  std::uint64_t origin() const { return origin_; }

 private:
  std::uint64_t origin_;
  std::atomic<std::uint64_t> seq_{0};
};

/// Every way a request can fail inside kiln.
enum class errc : std::uint8_t {
  unauthenticated,   ///< no key, or a key kiln does not know
  forbidden,         ///< a key that may not do this
  unknown_model,     ///< no such model, or no such version of it
  invalid_request,   ///< the request itself is wrong (see param)
  context_too_long,  ///< prompt + max_tokens exceed what the model or the replica holds
  over_limit,        ///< the team is over its limit
  shed,              ///< the pool is overloaded and this tier was shed
  unavailable,       ///< no replica can take it now (loading, none serving, refused)
  degraded,          ///< the pool gave up restarting its replicas for a while
  retry_budget,      ///< its replica was lost and the pool's retry budget is spent
  replica_lost,      ///< its replica died
  engine_failed,     ///< its engine failed (a device error)
  timed_out,         ///< no first token, or no end, within the pool's deadlines
  shutting_down,     ///< the node is stopping
  conflict,          ///< it contradicts what is stored (a registered version never changes)
  internal,          ///< a broken invariant
};

/// A stable snake_case name (logs, metrics labels).
std::string_view to_string(errc e);
/// Whether the owner may send the request to another replica (before its first token).
bool retryable(errc e);
/// An actor's answer that failed with one of kiln's errors (net/ maps it like any other).
caf::error make_error(errc e, std::string message);
/// The kiln error an actor answered with, if it was one.
std::optional<errc> kiln_error(const caf::error& e);

/// One message of a conversation, as the client sent it.
struct chat_turn {
  std::string role;
  std::string content;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, chat_turn& x) {
  return f(caf::meta::type_name("chat_turn"), x.role, x.content);
}

/// One chat completion. The front fills id, team (resolved from the key, which goes no
/// further), model as asked, priority, sampling, conversation id, messages and sink;
/// admission the version, prompt tokens and defaults; the router (its owner) owner and attempt.
struct request {
  request_id id;
  std::string team;
  std::string model;    ///< as asked: "chat-7b" or "chat-7b@v2"
  std::string version;  ///< resolved by admission
  engine::priority priority = engine::priority::standard;
  engine::sampling_params sampling;  ///< max_tokens 0: the pool's default
  std::string conversation_id;
  std::vector<chat_turn> messages;
  /// The chat template's input as JSON text (messages with every field, tools, template
  /// variables); when set, a model with a template renders it instead of `messages`.
  std::string chat_json;
  std::int64_t created_unix = 0;  ///< when the front took it (the template's strftime_now)
  std::string prompt_text;  ///< /v1/completions: tokenized as it is, no template
  /// prompt_text gets the special tokens its tokenizer adds around a text (Llama's BOS), as
  /// vLLM's add_special_tokens, true by default for /v1/completions
  bool prompt_specials = true;
  engine::token_list prompt;  ///< shared by the request's copies
  caf::actor sink;   ///< receives stream_tokens (or stream_batch), then one stream_end or stream_error
  /// Its end means the client went away and the request is cancelled wherever it runs (null:
  /// the sink's end). A sink shared by many requests (a front's) needs one per request.
  caf::actor client;
  caf::actor owner;  ///< receives first_token, job_done, job_failed from the engine
  std::uint8_t attempt = 0;  ///< 0 the first dispatch, then one more per retry
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, request& x) {
  return f(caf::meta::type_name("request"), x.id, x.team, x.model, x.version, x.priority, x.sampling,
           x.conversation_id, x.messages, x.chat_json, x.created_unix, x.prompt_text, x.prompt_specials, x.prompt, x.sink, x.client, x.owner,
           x.attempt);
}

/// Tokens a request adds to a replica's load: prompt plus the output it may produce.
inline std::int64_t request_tokens(const request& r) {
  return static_cast<std::int64_t>(r.prompt.size()) + r.sampling.max_tokens;
}

}  // namespace kiln::actors

namespace kiln::engine {

// The engine's value types cross actors (and, later, nodes) as they are.
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, sampling_params& x) {
  bool has_seed = x.seed.has_value();
  std::uint64_t seed = x.seed.value_or(0);
  auto load = caf::meta::load_callback([&]() -> caf::error {
    x.seed = has_seed ? std::optional<std::uint64_t>(seed) : std::nullopt;
    return caf::none;
  });
  return f(caf::meta::type_name("sampling_params"), x.max_tokens, x.temperature, x.top_k, x.top_p, has_seed, seed,
           x.stop, x.logprobs, x.prompt_logprobs, x.presence_penalty, x.frequency_penalty, x.repetition_penalty,
           x.logit_bias, x.stop_token_ids, x.min_tokens, x.ignore_eos, load);
}

// Log-probabilities cross nodes as their IEEE bits: CAF's binary format cannot carry -inf or
// NaN (a prompt's first token has none), and a message it cannot read is dropped whole.
inline std::uint32_t float_bits(float v) {
  std::uint32_t b;
  std::memcpy(&b, &v, sizeof b);
  return b;
}
inline float bits_float(std::uint32_t b) {
  float v;
  std::memcpy(&v, &b, sizeof v);
  return v;
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, token_alt& x) {
  std::uint32_t bits = float_bits(x.logprob);
  auto load = caf::meta::load_callback([&]() -> caf::error {
    x.logprob = bits_float(bits);
    return caf::none;
  });
  return f(caf::meta::type_name("token_alt"), x.token, bits, load);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, token_logprob& x) {
  std::uint32_t bits = float_bits(x.logprob);
  auto load = caf::meta::load_callback([&]() -> caf::error {
    x.logprob = bits_float(bits);
    return caf::none;
  });
  return f(caf::meta::type_name("token_logprob"), x.token, bits, x.top, load);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, usage& x) {
  return f(caf::meta::type_name("usage"), x.prompt_tokens, x.completion_tokens, x.cached_tokens);
}

}  // namespace kiln::engine
