#pragma once
// CPU twin of the sampling kernel. Defined so a GPU block can reproduce it exactly:
// temperature <= 0 or top_k == 1: argmax (lowest id on ties). Otherwise probabilities
// exp((l - max) / T); top-k keeps logits >= the k-th largest; top-p then keeps tokens whose
// logit is >= the highest threshold whose kept mass reaches top_p; the draw u in [0, 1)
// walks the kept tokens in id order.
#include <cstdint>

namespace kiln::kernels::reference {

/// splitmix64's finaliser: the seeded draws of the sampler.
constexpr std::uint64_t mix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

/// The uniform draw in [0, 1) for a sequence's seed and the position of the token sampled.
constexpr double sample_uniform(std::uint64_t seed, int position) {
  return static_cast<double>(mix64(seed ^ mix64(static_cast<std::uint64_t>(position) + 0x51ed)) >> 11) * 0x1.0p-53;
}

struct sample_params {
  std::uint64_t seed = 0;
  int position = 0;
  float temperature = 1.f;
  int top_k = 0;      ///< 0: off
  float top_p = 1.f;  ///< 1: off
};

std::int32_t sample_row(const float* logits, int vocab, const sample_params& p);

/// What one token's logit undergoes before sampling, in vLLM's order: the logit bias added,
/// then the repetition penalty (a positive logit divided by it, a negative one multiplied;
/// 1: none), then `subtract` (the presence and frequency penalties) taken off.
struct logit_adjust {
  std::int32_t token = 0;
  float bias = 0.f;
  float repeat = 1.f;
  float subtract = 0.f;
};

/// Applies `n` adjustments (tokens outside [0, vocab) are skipped) to a row of logits.
void adjust_logits(float* logits, int vocab, const logit_adjust* adjust, int n);

}  // namespace kiln::kernels::reference
