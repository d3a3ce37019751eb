#pragma once
// The engine of a remote pool's replica: instead of stepping a model it streams each request
// from one OpenAI-compatible upstream (vLLM, SGLang, another kiln) and plays the engine's part
// for everything above it: tokens to the request's sink, first_token / job_done / job_failed
// to its owner, its load to the replica's heartbeat.
//
// Every heartbeat it polls the upstream's /health and /metrics; it tells its replica it is
// ready after the first healthy answer, and while the last poll failed it does not answer the
// replica's stats (so the replica misses its heartbeats and leaves the ranking after three).
// The HTTP work runs on the upstream client's own thread (engine/upstream_client); each read
// arrives here as one message. A client that goes away closes its upstream request at once.
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include <caf/stateful_actor.hpp>

#include "actors/engine_actor.hpp"
#include "engine/upstream_client.hpp"

namespace kiln::actors {

struct remote_engine_state {
  struct job {
    request_id id;
    caf::actor sink;
    caf::actor owner;
    caf::actor client;
    std::uint8_t attempt = 0;
    caf::actor_clock::time_point arrival;
    double ttft_ms = -1;
    int prompt_tokens = 0;      ///< by the version's tokenizer
    int chunks = 0;             ///< content chunks so far (a token each, until usage says)
    std::int64_t tokens = 0;    ///< what it adds to the load (prompt + max_tokens)
    engine::finish_reason finish = engine::finish_reason::none;
    bool has_usage = false;
    engine::usage usage;
  };
  engine_identity who;
  std::string upstream;  ///< its base URL
  std::shared_ptr<const pool_runtime> pool;
  std::unique_ptr<engine::upstream::client> client;
  std::unordered_map<std::uint64_t, job> jobs;
  std::unordered_map<request_id, std::uint64_t, request_id_hash> by_request;
  std::unordered_set<caf::actor_addr> watched;
  std::unordered_set<caf::actor_addr> gone_owners;
  std::uint64_t next_seq = 0;
  bool ready = false;     ///< the upstream has answered a health poll
  bool healthy = false;   ///< the last poll was answered
  bool polling = false;   ///< a poll is out (one still out at the next beat is a miss)
  std::string last_error;
  engine::upstream::load_report upstream_load;
  std::int64_t own_tokens = 0;
  engine_load totals;
  std::shared_ptr<fleet_gauges> gauges;

  engine_load load() const;
  void publish() const;
  static inline const char* name = "kiln.remote_engine";
};

/// The engine of replica `who`, calling `upstream`; `parent` (its replica) hears engine_ready
/// or engine_unloadable.
caf::behavior remote_engine(caf::stateful_actor<remote_engine_state>* self, engine_identity who, std::string upstream,
                            std::shared_ptr<const pool_runtime> pool, std::shared_ptr<fleet_gauges> gauges,
                            caf::actor parent);

/// The body of an upstream chat (or completions) call for `r`, and its path.
std::pair<std::string, std::string> upstream_body(const request& r, const pool_runtime& pool);

}  // namespace kiln::actors
