#include "kernels/reference/sampling.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

namespace kiln::kernels::reference {

void adjust_logits(float* logits, int vocab, const logit_adjust* adjust, int n) {
  for (int i = 0; i < n; ++i) {
    const logit_adjust& a = adjust[i];
    if (a.token < 0 || a.token >= vocab) continue;
    float l = logits[a.token] + a.bias;
    if (a.repeat != 1.f) l = l > 0 ? l / a.repeat : l * a.repeat;
    logits[a.token] = l - a.subtract;
  }
}

std::int32_t sample_row(const float* logits, int vocab, const sample_params& p) {
  int best = 0;
  for (int i = 1; i < vocab; ++i)
    if (logits[i] > logits[best]) best = i;
  if (p.temperature <= 0 || p.top_k == 1) return best;
  const float max = logits[best];
  std::vector<float> prob(static_cast<std::size_t>(vocab));
  for (int i = 0; i < vocab; ++i) prob[static_cast<std::size_t>(i)] = std::exp((logits[i] - max) / p.temperature);
  float threshold = -INFINITY;
  if (p.top_k > 0 && p.top_k < vocab) {
    std::vector<float> sorted(logits, logits + vocab);
    std::nth_element(sorted.begin(), sorted.begin() + (p.top_k - 1), sorted.end(), std::greater<>());
    threshold = sorted[static_cast<std::size_t>(p.top_k - 1)];
  }
  if (p.top_p < 1.f) {
    // The highest logit threshold whose kept mass still reaches top_p of the top-k mass:
    // walk the kept tokens from the highest logit down, a whole tie group at a time.
    std::vector<std::int32_t> order;
    for (int i = 0; i < vocab; ++i)
      if (logits[i] >= threshold) order.push_back(i);
    std::sort(order.begin(), order.end(), [&](std::int32_t a, std::int32_t b) { return logits[a] > logits[b]; });
    float total = 0;
    for (auto i : order) total += prob[static_cast<std::size_t>(i)];
    float mass = 0;
    for (std::size_t j = 0; j < order.size(); ++j) {
      mass += prob[static_cast<std::size_t>(order[j])];
      const bool group_end = j + 1 == order.size() || logits[order[j + 1]] < logits[order[j]];
      if (group_end && mass >= p.top_p * total) {
        threshold = logits[order[j]];
        break;
      }
    }
  }
  float total = 0;
  for (int i = 0; i < vocab; ++i)
    if (logits[i] >= threshold) total += prob[static_cast<std::size_t>(i)];
  float u = static_cast<float>(sample_uniform(p.seed, p.position)) * total;
  int last = best;
  for (int i = 0; i < vocab; ++i) {
    if (logits[i] < threshold) continue;
    last = i;
    u -= prob[static_cast<std::size_t>(i)];
    if (u < 0) return i;
  }
  return last;
}

}  // namespace kiln::kernels::reference
