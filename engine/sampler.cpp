#include "engine/sampler.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

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

logprob_row logprobs_of(std::span<const float> logits, token_id token, int top) {
  logprob_row row;
  row.token = token;
  if (logits.empty()) return row;
  const float max = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (float l : logits) sum += std::exp(static_cast<double>(l) - max);
  const double log_z = max + std::log(sum);
  auto lp = [&](std::size_t i) { return static_cast<float>(static_cast<double>(logits[i]) - log_z); };
  row.logprob = token >= 0 && static_cast<std::size_t>(token) < logits.size() ? lp(static_cast<std::size_t>(token))
                                                                              : -std::numeric_limits<float>::infinity();
  const std::size_t n = std::min(logits.size(), static_cast<std::size_t>(std::max(0, top)));
  if (n == 0) return row;
  std::vector<std::int32_t> ids(logits.size());
  std::iota(ids.begin(), ids.end(), 0);
  std::partial_sort(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(n), ids.end(), [&](std::int32_t a, std::int32_t b) {
    return logits[static_cast<std::size_t>(a)] > logits[static_cast<std::size_t>(b)] ||
           (logits[static_cast<std::size_t>(a)] == logits[static_cast<std::size_t>(b)] && a < b);
  });
  for (std::size_t i = 0; i < n; ++i) row.top.emplace_back(ids[i], lp(static_cast<std::size_t>(ids[i])));
  return row;
}

std::vector<prompt_row> plan_prompt_rows(const step_plan& plan, const scheduler& sched,
                                         std::vector<prompt_logprobs_part>& parts) {
  std::vector<prompt_row> rows;
  std::size_t row = 0;
  for (const plan_item& item : plan.items) {
    const seq_status* s = item.prompt_logprobs >= 0 ? sched.find(item.id) : nullptr;
    if (s) {
      // Row j (position context_before + j) predicts the token after it, while that is a prompt token.
      const int first = item.context_before;
      const int last = std::min(item.context_before + item.tokens, s->prompt_len - 1);
      if (first < last) {
        parts.push_back({item.id, first + 1, {}});
        for (int p = first; p < last; ++p)
          rows.push_back({row + static_cast<std::size_t>(p - first), parts.size() - 1,
                          s->tokens[static_cast<std::size_t>(p + 1)], item.prompt_logprobs});
      }
    }
    row += static_cast<std::size_t>(item.tokens);
  }
  return rows;
}

}  // namespace kiln::engine
