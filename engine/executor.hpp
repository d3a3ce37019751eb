#pragma once
// The executor interface: runs one step plan and returns the sampled tokens.
// Implementations: sim (cost model, no math); cpu and cuda follow.
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "engine/scheduler.hpp"
#include "engine/types.hpp"
#include "kernels/reference/sampling.hpp"

namespace kiln::engine {

using logit_adjust = kernels::reference::logit_adjust;

/// A sequence that samples a token this step, in plan order.
struct sample_slot {
  seq_id id = 0;
  std::uint64_t rng_seed = 0;  ///< fixed per sequence: from the request seed or the prompt
  int position = 0;            ///< index of the token being sampled among the outputs
  double temperature = 1.0;
  int top_k = 0;               ///< 0: off
  double top_p = 1.0;
  std::uint64_t answer_seed = 0;  ///< of the prompt and the request seed only (never the replica)
  int logprobs = -1;              ///< >= 0: the sampled token's log-probability and this many alternatives
  /// What the logits undergo before this token is sampled, by token id (logit bias,
  /// penalties); log-probabilities stay the raw distribution's.
  std::span<const logit_adjust> adjust = {};
  int answer_min = 0;  ///< a modelled answer (the sim executor's) runs at least this many tokens
};

/// A token's log-probability and the top alternatives at its position, most likely first.
struct logprob_row {
  token_id token = 0;
  float logprob = 0;
  std::vector<std::pair<token_id, float>> top;
};

/// Prompt log-probabilities of one plan item: rows[i] is the token at first_position + i.
struct prompt_logprobs_part {
  seq_id id = 0;
  int first_position = 0;
  std::vector<logprob_row> rows;
};

/// A row of a plan whose logits give a prompt token's log-probability.
struct prompt_row {
  std::size_t row = 0;       ///< index among the step's rows
  std::size_t part = 0;      ///< index into step_execution::prompt_logprobs
  token_id next = 0;         ///< the prompt token that row predicts
  int top = 0;
};

/// The parts and rows of a plan's prompt_logprobs items (rows counted over every item's tokens).
std::vector<prompt_row> plan_prompt_rows(const step_plan& plan, const scheduler& sched,
                                         std::vector<prompt_logprobs_part>& parts);

struct step_execution {
  double seconds = 0;               ///< how long the step took (modelled or measured)
  std::vector<token_id> tokens;     ///< one per sample slot, same order
  std::vector<logprob_row> logprobs;  ///< one per sample slot when any asks (rows of the others unset)
  std::vector<prompt_logprobs_part> prompt_logprobs;  ///< of the items with prompt_logprobs
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
