#pragma once
// What a request's logit bias and penalties make of the logits at each step: the tokens its
// answer holds so far (and its prompt's, for the repetition penalty), turned into the
// per-token adjustments the executors apply before sampling.
#include <span>
#include <utility>
#include <vector>

#include "engine/types.hpp"
#include "kernels/reference/sampling.hpp"

namespace kiln::engine {

/// The tokens one sequence's penalties look at.
struct token_tally {
  std::vector<std::pair<token_id, int>> answer;  ///< sampled tokens and their counts, by id
  std::vector<token_id> prompt;                  ///< the prompt's distinct tokens, by id (repetition penalty)
  bool prompt_read = false;

  void add(token_id t);
};

/// Appends the adjustments of `p` for the next token of a sequence whose prompt is `prompt`
/// (read once into the tally when the repetition penalty needs it) to `out`: by token id,
/// each token once. `barred`: tokens that cannot be sampled now (the model's end tokens before
/// min_tokens; the request's stop_token_ids are barred with them).
void append_adjustments(const sampling_params& p, token_tally& tally, std::span<const token_id> prompt,
                        std::span<const token_id> barred, std::vector<kernels::reference::logit_adjust>& out);

}  // namespace kiln::engine
