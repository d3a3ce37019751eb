#pragma once
// The engine actor: owns one engine_core and advances it one step at a time.
//
// It starts `loading`: its core (executor, weights in place, KV) is built by the loader, off
// the scheduler's threads, and arrives as a message; then it tells its replica and serves.
// A sim step's modelled duration passes on the actor clock before its tokens leave, so the
// same actor runs on real time in `kiln serve` and on virtual time in tests. A cpu or cuda
// step runs on the core's worker thread and its end arrives as a message.
//
// Each request's tokens go straight to its sink; its owner hears first_token (before the
// first tokens leave), job_done and job_failed. A request whose owner has ended is finished
// at the sink by the engine itself. An executor failure fails every request it holds and
// ends the actor abnormally, so its replica starts a fresh one.
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <variant>

#include <caf/stateful_actor.hpp>

#include "actors/gauges.hpp"
#include "actors/id_map.hpp"
#include "actors/loader.hpp"
#include "actors/messages.hpp"
#include "actors/pool_runtime.hpp"
#include "engine/engine_core.hpp"

namespace kiln::actors {

struct engine_identity {
  std::string replica_id;
  std::string model;
  std::string version;
  std::string region;
};

/// The engine tells its replica it is ready (or why it cannot be).
struct engine_ready {
  std::string replica_id;
};
struct engine_unloadable {
  std::string replica_id;
  std::string why;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, engine_ready& x) {
  return f(caf::meta::type_name("engine_ready"), x.replica_id);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, engine_unloadable& x) {
  return f(caf::meta::type_name("engine_unloadable"), x.replica_id, x.why);
}

struct engine_state {
  struct job {
    request_id id;
    caf::actor sink;
    caf::actor owner;
    caf::actor client;  ///< whose end cancels it (the sink when the request names none)
    std::uint8_t attempt = 0;
    caf::actor_clock::time_point arrival;
    double ttft_ms = -1;
    engine::usage usage;  ///< so far: what a cancellation or failure reports
    // Coasting engines send a stream's tokens after its first at its end (or when it stops
    // early): what is held until then, besides its share of the quiet steps.
    std::int32_t unsent = 0;
    std::string unsent_text;
    /// engine_state::quiet_steps when its quiet share was last taken (a job takes a share
    /// from its first token on)
    std::uint64_t quiet_base = 0;
  };
  std::unique_ptr<engine::engine_core> core;
  engine_identity who;
  int default_max_tokens = 1024;
  id_map<job, engine::seq_id, seq_hash> jobs;  ///< walks that send go in sequence order (sorted_keys)
  id_map<engine::seq_id> by_request;
  std::unordered_set<caf::actor_addr> watched;      ///< sinks and owners this engine monitors
  std::unordered_set<caf::actor_addr> gone_owners;  ///< owners that ended
  engine::seq_id next_seq = 0;
  engine::step_result pending;  ///< the step now "running"
  bool stepping = false;
  // Coasting (sim executor, when the pool allows it): the steps of a steady decode run as one
  // timer; any other message first settles them (see settle() in engine_actor.cpp).
  bool coast = false;
  bool coasting = false;
  double fault_fraction = 0;  ///< sim drills: requests that end in an injected engine error
  caf::actor_clock::time_point coast_from;
  std::vector<caf::timespan> coast_ends;  ///< each coasting step's end, after coast_from
  std::vector<double> coast_seconds;      ///< begin_coast's step times (kept: no allocation a coast)
  /// send_outputs' batches, one per sink (kept: no allocation a step)
  std::vector<std::pair<caf::actor, stream_batch>> step_batches;
  /// Moved on when a coast ends: its wakeup's ticket (see wake_ticket.hpp) is then void.
  std::shared_ptr<std::uint64_t> coast_epoch = std::make_shared<std::uint64_t>(0);
  caf::actor_clock* clock = nullptr;      ///< for the tokens of a coast cut short by the engine's end
  /// Coasting steps that have ended `elapsed` after coast_from.
  std::size_t coast_steps_ended(caf::timespan elapsed) const;
  /// The quiet steps delivered so far (see step_result::quiet_steps): a job that has its first
  /// token holds one token of each since its quiet_base, counted only when needed.
  std::uint64_t quiet_steps = 0;
  std::uint64_t steps = 0;
  engine_load totals;           ///< received, prompt and cached token sums
  double load_seconds = 0;
  double slow_factor = 1;       ///< chaos: step time multiplier
  std::shared_ptr<fleet_gauges> gauges;
  mutable engine_row_hint gauge_row;  ///< where publish() writes

  engine_state() = default;
  engine_state(const engine_state&) = delete;
  engine_state& operator=(const engine_state&) = delete;
  /// An engine that ends (killed, say) while coasting still sends the tokens of the steps that
  /// had ended, as a step-by-step engine would have before it died.
  ~engine_state();

  engine::engine_request to_engine_request(const request& r, engine::seq_id seq) const;
  /// The engine's figures with `ahead` more steps of its coast applied (see coast_steps_begun()).
  engine_load load(int ahead = 0) const;
  /// Drops every job whose sink is gone, telling their owners; returns how many.
  int cancel_client(caf::event_based_actor* self, const caf::actor_addr& sink);
  /// Sends what a coasting engine held of a job's tokens.
  void flush(job& j);
  /// A job's quiet tokens join its unsent ones, as of `before` (the quiet steps delivered
  /// before the result that has an output for it); its quiet share restarts at `after`. A job
  /// before its first token has none.
  static void take_quiet(job& j, std::uint64_t before, std::uint64_t after);
  /// A job's usage so far, its quiet tokens included: what a cancellation or failure reports.
  engine::usage usage_of(const job& j) const;
  void publish(int ahead = 0) const;
  /// While coasting: the steps of the coast that step-by-step running would have begun by
  /// `now` (those ended and the one under way), when none of them ends a sequence; else 0.
  /// A coasting engine shows its figures at that many steps on without settling the coast.
  int coast_steps_begun(caf::actor_clock::time_point now) const;
  static inline const char* name = "kiln.engine";
};

/// Builds the engine core a pool's runtime describes (sim, cpu or cuda executor), or says
/// why it cannot (the device ran out of memory, say). Blocking: the loader runs it.
std::variant<std::unique_ptr<engine::engine_core>, std::string> make_engine_core(const pool_runtime& pool,
                                                                                 std::uint64_t salt);

/// `parent` (its replica) hears engine_ready or engine_unloadable.
caf::behavior engine_actor(caf::stateful_actor<engine_state>* self, engine_identity who,
                           std::shared_ptr<const pool_runtime> pool, std::shared_ptr<fleet_gauges> gauges,
                           std::shared_ptr<loader> loader, caf::actor parent);

}  // namespace kiln::actors
