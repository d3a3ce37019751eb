#include "engine/sim_executor.hpp"

#include <algorithm>

#include "kernels/reference/sampling.hpp"

namespace kiln::engine {

using kernels::reference::mix64;

sim_executor::sim_executor(cost_model model, sim_text text, int vocab_size, token_id eos)
    : model_(std::move(model)), text_(text), vocab_size_(std::max(2, vocab_size)), eos_(eos) {
  text_.min_output_tokens = std::max(1, text_.min_output_tokens);
  text_.max_output_tokens = std::max(text_.min_output_tokens, text_.max_output_tokens);
}

step_shape sim_executor::shape_of(const step_plan& plan) const {
  step_shape s;
  for (const plan_item& item : plan.items) {
    s.new_tokens += item.tokens;
    s.kv_tokens_read += item.context_before + item.tokens;
    if (item.prefill) s.attention_flops += model_.attention_flops(item.tokens, item.context_before);
  }
  return s;
}

int sim_executor::natural_length(std::uint64_t answer_seed) const {
  const auto span = static_cast<std::uint64_t>(text_.max_output_tokens - text_.min_output_tokens + 1);
  return text_.min_output_tokens + static_cast<int>(mix64(answer_seed) % span);
}

token_id sim_executor::token_at(std::uint64_t answer_seed, int position) const {
  if (position >= natural_length(answer_seed)) return eos_;
  const std::uint64_t r = mix64(answer_seed ^ mix64(static_cast<std::uint64_t>(position) + 1));
  // Any vocabulary token but eos (ids 1 .. vocab-1).
  return 1 + static_cast<token_id>(r % static_cast<std::uint64_t>(vocab_size_ - 1));
}

step_execution sim_executor::run(const step_plan& plan, const scheduler&, std::span<const sample_slot> slots) {
  step_execution out;
  out.seconds = plan.empty() ? 0.0 : model_.time(shape_of(plan)).total;
  out.tokens.reserve(slots.size());
  for (const sample_slot& slot : slots) out.tokens.push_back(token_at(slot.answer_seed, slot.position));
  return out;
}

}  // namespace kiln::engine
