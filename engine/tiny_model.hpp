#pragma once
// Small Llama-architecture models with deterministic random weights: for tests, for the
// embedded default's `tiny-chat` pool, and for `kiln make-tiny-model`.
#include <cstdint>
#include <string>

#include "engine/llama_model.hpp"
#include "engine/safetensors.hpp"

namespace kiln::engine {

/// Weights drawn from a seeded normal distribution scaled by 1/sqrt(fan-in); norms near 1.
llama_weights random_llama(const llama_config& cfg, std::uint64_t seed);

/// Writes config.json and the weights (one model.safetensors, or `shards` files plus
/// model.safetensors.index.json) into `dir`. An error line, or empty on success.
std::string save_llama(const std::string& dir, const llama_weights& w, dtype type = dtype::f32, int shards = 1);

}  // namespace kiln::engine
