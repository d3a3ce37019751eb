#pragma once
// A naive single-sequence Llama forward pass: plain loops, contiguous K/V, recomputed from
// scratch, sharing no code with the engine's executor. The reference the batched, paged,
// chunked, prefix-cached path must match.
#include <vector>

#include "engine/llama_model.hpp"
#include "engine/types.hpp"

namespace kiln::test {

/// Logits [vocab] of the next token after `tokens`.
std::vector<float> naive_next_logits(const engine::llama_weights& w, const std::vector<engine::token_id>& tokens);
/// The same over tensor-parallel shards: each rank's partial o_proj and down_proj results
/// are summed (the all-reduce) before the residual add.
std::vector<float> naive_next_logits_tp(const std::vector<const engine::llama_weights*>& ranks,
                                        const std::vector<engine::token_id>& tokens);

}  // namespace kiln::test
