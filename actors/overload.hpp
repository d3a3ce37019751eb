#pragma once
// Seed 000's fixed order under overload, as one pure decision. Load is a pool's charged
// tokens in flight (prompt + max_tokens of the requests admission let in) against its
// capacity:
//   - below kBusy everything runs;
//   - from kBusy batch pauses (waits in its queue) and runs only on idle capacity;
//   - at capacity, a team above its guaranteed share gets 429; standard requests inside their
//     share wait in their queue; interactive requests inside their share still run: they are
//     never shed;
//   - a queue past its limit sheds its newest request with 503 (the lowest tier present first).
// A team's guaranteed share is a fraction of capacity kept for it: within it, a request runs
// as if the pool were idle for that team.
#include <cstdint>

#include "engine/types.hpp"

namespace kiln::actors {

inline constexpr double kBusy = 0.8;  ///< load at which batch pauses

enum class admission_verdict : std::uint8_t { run, wait, over_share, shed };

struct load_picture {
  std::int64_t capacity = 0;        ///< the pool's tokens in flight at full load
  std::int64_t in_flight = 0;       ///< charged tokens in flight now, all teams
  std::int64_t team_in_flight = 0;  ///< of those, the asking team's
  double team_share = 0;            ///< the asking team's guaranteed share (0: none)
  std::int64_t charge = 0;          ///< what the request would add
  bool queue_full = false;          ///< its tier's queue is at its limit
};

/// What to do with a request of `tier` now.
admission_verdict decide(const load_picture& p, engine::priority tier);

}  // namespace kiln::actors
