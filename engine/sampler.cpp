#include "engine/sampler.hpp"

#include "kernels/reference/sampling.hpp"

namespace kiln::engine {

double sample_uniform(std::uint64_t seed, int position) {
  return kernels::reference::sample_uniform(seed, position);
}

token_id sample(std::span<const float> logits, const sample_slot& slot) {
  return kernels::reference::sample_row(logits.data(), static_cast<int>(logits.size()),
                                        {slot.rng_seed, slot.position, static_cast<float>(slot.temperature), slot.top_k,
                                         static_cast<float>(slot.top_p)});
}

}  // namespace kiln::engine
