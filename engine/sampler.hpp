#pragma once
// Token sampling from logits: greedy, temperature, top-k, top-p, by the CPU twin of the
// sampling kernel (kernels/reference/sampling.hpp). The random draw depends only on the
// sequence's seed and the token's position, so a sequence samples the same tokens alone or
// inside any batch.
#include <cstdint>
#include <span>

#include "engine/executor.hpp"

namespace kiln::engine {

token_id sample(std::span<const float> logits, const sample_slot& slot);
/// `token`'s log-probability under softmax(logits) and the `top` most likely tokens (ties:
/// lower id first), computed in double precision.
logprob_row logprobs_of(std::span<const float> logits, token_id token, int top);
/// The uniform [0, 1) draw for a sequence seed and position.
double sample_uniform(std::uint64_t seed, int position);

}  // namespace kiln::engine
