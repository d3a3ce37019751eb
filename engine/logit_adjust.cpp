#include "engine/logit_adjust.hpp"

#include <algorithm>
#include <limits>

namespace kiln::engine {

void token_tally::add(token_id t) {
  auto it = std::lower_bound(answer.begin(), answer.end(), t, [](const auto& e, token_id v) { return e.first < v; });
  if (it != answer.end() && it->first == t)
    ++it->second;
  else
    answer.insert(it, {t, 1});
}

void append_adjustments(const sampling_params& p, token_tally& tally, std::span<const token_id> prompt,
                        std::span<const token_id> barred, std::vector<kernels::reference::logit_adjust>& out) {
  const auto repeat = static_cast<float>(p.repetition_penalty);
  if (repeat != 1.f && !tally.prompt_read) {
    tally.prompt.assign(prompt.begin(), prompt.end());
    std::sort(tally.prompt.begin(), tally.prompt.end());
    tally.prompt.erase(std::unique(tally.prompt.begin(), tally.prompt.end()), tally.prompt.end());
    tally.prompt_read = true;
  }
  const std::size_t first = out.size();
  for (const auto& [t, bias] : p.logit_bias) out.push_back({t, bias, 1.f, 0.f});
  constexpr float never = -std::numeric_limits<float>::infinity();
  for (token_id t : barred) out.push_back({t, never, 1.f, 0.f});
  if (!barred.empty())
    for (token_id t : p.stop_token_ids) out.push_back({t, never, 1.f, 0.f});
  const bool penalised = p.presence_penalty != 0 || p.frequency_penalty != 0 || repeat != 1.f;
  if (penalised)
    for (const auto& [t, n] : tally.answer)
      out.push_back({t, 0.f, repeat, static_cast<float>(p.presence_penalty + p.frequency_penalty * n)});
  if (repeat != 1.f)
    for (token_id t : tally.prompt) out.push_back({t, 0.f, repeat, 0.f});
  // One entry per token: the bias, the repetition penalty (once) and the subtraction merged.
  const auto begin = out.begin() + static_cast<std::ptrdiff_t>(first);
  const auto by_token = [](const auto& a, const auto& b) { return a.token < b.token; };
  if (!std::is_sorted(begin, out.end(), by_token)) std::stable_sort(begin, out.end(), by_token);  // a bias alone already is
  auto kept = begin;
  for (auto it = begin; it != out.end(); ++it) {
    if (it != begin && (kept - 1)->token == it->token) {
      auto& k = *(kept - 1);
      k.bias += it->bias;
      k.subtract += it->subtract;
      if (it->repeat != 1.f) k.repeat = it->repeat;
    } else {
      *kept++ = *it;
    }
  }
  out.erase(kept, out.end());
}

}  // namespace kiln::engine
