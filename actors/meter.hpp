#pragma once
// Metering: one usage record per finished request (and per refusal) into the usage WAL,
// written on the meter's own thread with fsync batched every 100 ms; a completed request's
// end reaches its client only once its record is durable, so what a client was told it
// received is what is counted. Every minute of the actor clock the records go to the store
// writer, which folds them into usage rows (one per team, model, version and minute; each
// request id once, across every node that meters into the store) with the last record they
// include; then their segments are deleted. At start, what the store has not folded yet is
// replayed from the WAL.
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <caf/stateful_actor.hpp>

#include "actors/gauges.hpp"
#include "actors/loader.hpp"
#include "actors/messages.hpp"
#include "config/usage_wal.hpp"

namespace kiln::actors {

inline constexpr caf::atom_value meter_name = caf::atom("meter");
/// Fold what is durable now (a store that was away is back: cluster/control_link).
using fold_now_atom = caf::atom_constant<caf::atom("foldnow")>;

/// How one request ended, for the ledger.
struct usage_note {
  request_id id;
  std::string team;
  std::string model;
  std::string version;
  engine::usage usage;
  bool ran = true;    ///< it ran (requests + 1); false: refused (shed + 1)
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, usage_note& x) {
  return f(caf::meta::type_name("usage_note"), x.id, x.team, x.model, x.version, x.usage, x.ran);
}

/// A completed request's end, to reach `sink` once its note is durable.
struct metered_end {
  usage_note note;
  stream_end end;
  caf::actor sink;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, metered_end& x) {
  return f(caf::meta::type_name("metered_end"), x.note, x.end, x.sink);
}

struct meter_deps {
  std::string wal_prefix;          ///< segments are <prefix>.<n>
  std::uint64_t folded_seq = 0;    ///< the store's watermark at start
  /// A store on another node (the control node's): the ledger this node's folds go to, and
  /// the file where the watermark of its last fold is noted (the store is not asked at start:
  /// it may be unreachable; a fold it partly holds says so).
  std::string ledger;
  std::string watermark_file;
  std::int64_t unix_at_start = 0;  ///< wall seconds when the actor clock read `clock_at_start`
  caf::actor_clock::time_point clock_at_start;
  caf::timespan flush_every = std::chrono::milliseconds(100);
  caf::timespan fold_every = std::chrono::seconds(60);
  caf::timespan refold_every = std::chrono::seconds(2);  ///< after a fold the store did not take
  std::shared_ptr<fleet_gauges> gauges;  ///< per-team counters for /metrics
};

struct meter_state {
  meter_deps d;
  std::shared_ptr<config::usage_wal> wal;
  std::shared_ptr<loader> thread;
  std::uint64_t next_seq = 1;
  std::vector<config::usage_record> buffer;               ///< not yet written
  std::vector<std::pair<caf::actor, stream_end>> ends;    ///< leave after the next write
  std::vector<config::usage_record> durable;              ///< written, not yet folded
  std::vector<config::usage_record> writing_batch;        ///< the write in progress
  std::vector<std::pair<caf::actor, stream_end>> writing_ends;
  std::vector<config::usage_record> folding_batch;        ///< the fold in progress
  std::uint64_t folding_through = 0;
  std::vector<std::string> folding_closed;                ///< segments the fold empties
  bool replayed = false;
  bool writing = false;
  bool flush_armed = false;
  bool folding = false;
  bool fold_failing = false;  ///< the last fold failed (said once until one succeeds)
  bool refold_armed = false;
  std::uint64_t written = 0;  ///< records made durable so far
  std::uint64_t folded = 0;   ///< records folded into the store so far

  std::int64_t minute_now(caf::actor_clock::time_point now) const;
  static inline const char* name = "kiln.meter";
};

caf::behavior meter(caf::stateful_actor<meter_state>* self, meter_deps deps);

}  // namespace kiln::actors
