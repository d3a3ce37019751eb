#pragma once
// The executor interface: runs one step plan and returns the sampled tokens.
// Implementations: sim (cost model, no math); cpu and cuda follow.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "engine/scheduler.hpp"
#include "engine/types.hpp"

namespace kiln::engine {

/// A sequence that samples a token this step, in plan order.
struct sample_slot {
  seq_id id = 0;
  std::uint64_t rng_seed = 0;  ///< fixed per sequence: from the request seed or the prompt
  int position = 0;            ///< index of the token being sampled among the outputs
  double temperature = 1.0;
  int top_k = 0;               ///< 0: off
  double top_p = 1.0;
  std::uint64_t answer_seed = 0;  ///< of the prompt and the request seed only (never the replica)
};

struct step_execution {
  double seconds = 0;               ///< how long the step took (modelled or measured)
  std::vector<token_id> tokens;     ///< one per sample slot, same order
  std::string error;                ///< non-empty: the device failed; nothing was sampled
};

/// What putting the weights in place cost an executor.
struct executor_load {
  double seconds = 0;  ///< conversion and copies to the device (0 when the weights are used as loaded)
  double bytes = 0;    ///< weight bytes the executor holds
};

class executor {
 public:
  virtual ~executor() = default;
  /// Runs a plan; `sched` gives each planned sequence's tokens and block table.
  virtual step_execution run(const step_plan& plan, const scheduler& sched, std::span<const sample_slot> slots) = 0;
  /// Whether the step's time is modelled (the caller waits it out) rather than spent.
  virtual bool modelled_time() const { return false; }
  virtual executor_load load() const { return {}; }
};

}  // namespace kiln::engine
