#pragma once
// Tensor parallelism inside one replica: the share of a model that one of `size` ranks holds.
// A rank keeps whole attention heads (its query heads and the KV heads they read) and a
// slice of the MLP's intermediate columns; the output projections (o_proj, down_proj) keep
// full output rows over the rank's inputs, so the ranks' partial results sum to the whole
// (the all-reduce after each). Embeddings, norms and the head are replicated.
#include <string>
#include <variant>

#include "engine/llama_model.hpp"

namespace kiln::engine {

/// Rank `rank` of `size`; heads, KV heads and the intermediate size must divide by `size`.
std::variant<llama_weights, std::string> shard_for_rank(const llama_weights& w, int rank, int size);

}  // namespace kiln::engine
