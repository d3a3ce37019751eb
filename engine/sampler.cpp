#include "engine/sampler.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "engine/sim_executor.hpp"

namespace kiln::engine {

double sample_uniform(std::uint64_t seed, int position) {
  const std::uint64_t r = mix64(seed ^ mix64(static_cast<std::uint64_t>(position) + 0x51ed));
  return static_cast<double>(r >> 11) * 0x1.0p-53;
}

token_id sample(std::span<const float> logits, const sample_slot& slot) {
  const auto argmax = [&] {
    return static_cast<token_id>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  };
  if (slot.temperature <= 0 || slot.top_k == 1) return argmax();
  // Candidates by descending logit (ties: lower id first), cut to top-k.
  std::vector<token_id> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  const std::size_t k = slot.top_k > 0 ? std::min<std::size_t>(static_cast<std::size_t>(slot.top_k), order.size()) : order.size();
  const auto by_logit = [&](token_id a, token_id b) {
    const float la = logits[static_cast<std::size_t>(a)], lb = logits[static_cast<std::size_t>(b)];
    return la != lb ? la > lb : a < b;
  };
  std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k), order.end(), by_logit);
  order.resize(k);
  const double top = logits[static_cast<std::size_t>(order[0])];
  std::vector<double> p(k);
  double sum = 0;
  for (std::size_t i = 0; i < k; ++i) {
    p[i] = std::exp((logits[static_cast<std::size_t>(order[i])] - top) / slot.temperature);
    sum += p[i];
  }
  // Top-p: the smallest prefix whose mass reaches top_p.
  std::size_t keep = k;
  if (slot.top_p < 1.0) {
    double mass = 0;
    for (std::size_t i = 0; i < k; ++i) {
      mass += p[i] / sum;
      if (mass >= slot.top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  const double total = std::accumulate(p.begin(), p.begin() + static_cast<std::ptrdiff_t>(keep), 0.0);
  double u = sample_uniform(slot.rng_seed, slot.position) * total;
  for (std::size_t i = 0; i < keep; ++i) {
    u -= p[i];
    if (u < 0) return order[i];
  }
  return order[keep - 1];
}

}  // namespace kiln::engine
