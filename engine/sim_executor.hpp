#pragma once
// Sim executor: no math. Step latency from the roofline cost model; token ids from a
// deterministic generator of the prompt and the request's seed (never of the replica or the
// request id, so a retried request gets the same answer), ending with eos at a seeded length.
#include <span>

#include "engine/cost_model.hpp"
#include "engine/executor.hpp"

namespace kiln::engine {

struct sim_text {
  int min_output_tokens = 16;   ///< shortest natural answer before eos
  int max_output_tokens = 400;  ///< longest natural answer before eos
};

class sim_executor final : public executor {
 public:
  sim_executor(cost_model model, sim_text text, int vocab_size, token_id eos);
  step_execution run(const step_plan& plan, const scheduler& sched, std::span<const sample_slot> slots) override;
  bool modelled_time() const override { return true; }
  const cost_model& model() const { return model_; }
  /// The shape a plan presents to the cost model.
  step_shape shape_of(const step_plan& plan) const;
  /// Tokens an answer runs to before its eos.
  int natural_length(std::uint64_t answer_seed) const;
  /// The token at `position` of the answer (eos from its natural length on, or from `at_least`
  /// where that is longer).
  token_id token_at(std::uint64_t answer_seed, int position, int at_least = 0) const;
  /// token_at() for positions `first`, `first` + 1, ... into `out`.
  void tokens_at(std::uint64_t answer_seed, int first, std::span<token_id> out, int at_least = 0) const;
  /// A modelled distribution at a position, `seed` fixing it: `token` is the most likely one
  /// (probability 0.34-0.99), then `top` - 1 other tokens at half the remaining mass each.
  logprob_row modelled_logprobs(std::uint64_t seed, token_id token, int top) const;

 private:
  cost_model model_;
  sim_text text_;
  int vocab_size_;
  token_id eos_;
};

}  // namespace kiln::engine
