#include "engine/sim_executor.hpp"

#include <algorithm>
#include <cmath>

#include "engine/wide_loop.hpp"
#include "kernels/reference/sampling.hpp"

namespace kiln::engine {

using kernels::reference::mix64;

namespace {

// An answer's tokens `first`.. `first + n` (all before its end): any vocabulary token but
// eos (ids 1 .. span). Position p's draw is one multiply-xorshift round over a Weyl sequence
// started at the (mixed) answer seed, its top 32 bits scaled into the range by a multiply,
// not a division: the simulator makes every answer token this way, tens of millions a run.
KILN_WIDE_LOOP void answer_tokens(std::uint64_t answer_seed, int first, std::uint64_t span, token_id* out, std::size_t n) {
  constexpr std::uint64_t kWeyl = 0x9E3779B97F4A7C15ull;
  std::uint64_t w = mix64(~answer_seed) + (static_cast<std::uint64_t>(first) + 1) * kWeyl;
  for (std::size_t k = 0; k < n; ++k, w += kWeyl) {
    std::uint64_t r = (w ^ (w >> 31)) * 0xBF58476D1CE4E5B9ull;
    r ^= r >> 29;
    out[k] = 1 + static_cast<token_id>(((r >> 32) * span) >> 32);
  }
}

}  // namespace

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

token_id sim_executor::token_at(std::uint64_t answer_seed, int position, int at_least) const {
  token_id t = eos_;
  tokens_at(answer_seed, position, std::span(&t, 1), at_least);
  return t;
}

void sim_executor::tokens_at(std::uint64_t answer_seed, int first, std::span<token_id> out, int at_least) const {
  const int natural = std::max(natural_length(answer_seed), at_least);
  const auto span = static_cast<std::uint64_t>(vocab_size_ - 1);
  // Up to the natural end, then eos.
  const std::size_t before_end = static_cast<std::size_t>(std::clamp(natural - first, 0, static_cast<int>(out.size())));
  answer_tokens(answer_seed, first, span, out.data(), before_end);
  std::fill(out.begin() + static_cast<std::ptrdiff_t>(before_end), out.end(), eos_);
}

logprob_row sim_executor::modelled_logprobs(std::uint64_t seed, token_id token, int top) const {
  const double p = 0.34 + 0.65 * kernels::reference::sample_uniform(seed, 0);
  logprob_row row{token, static_cast<float>(std::log(p)), {}};
  if (top <= 0) return row;
  row.top.emplace_back(token, row.logprob);
  double mass = 1 - p;
  const auto want = static_cast<std::size_t>(std::min(top, vocab_size_));
  // Seeded draws; a small vocabulary's last ones in id order.
  const auto span = static_cast<std::uint64_t>(vocab_size_);
  for (std::uint64_t k = 1; row.top.size() < want; ++k) {
    const auto alt = static_cast<token_id>(k <= 4 * want ? mix64(seed ^ mix64(k)) % span : (k - 4 * want - 1) % span);
    if (std::any_of(row.top.begin(), row.top.end(), [&](const auto& t) { return t.first == alt; })) continue;
    mass /= 2;
    row.top.emplace_back(alt, static_cast<float>(std::log(mass)));
  }
  return row;
}

step_execution sim_executor::run(const step_plan& plan, const scheduler& sched, std::span<const sample_slot> slots) {
  step_execution out;
  out.seconds = plan.empty() ? 0.0 : model_.time(shape_of(plan)).total;
  out.tokens.reserve(slots.size());
  for (const sample_slot& slot : slots) out.tokens.push_back(token_at(slot.answer_seed, slot.position, slot.answer_min));
  for (std::size_t i = 0; i < slots.size(); ++i) {
    if (slots[i].logprobs < 0) continue;
    out.logprobs.resize(slots.size());
    out.logprobs[i] = modelled_logprobs(slots[i].answer_seed ^ mix64(static_cast<std::uint64_t>(slots[i].position) + 7),
                                        out.tokens[i], slots[i].logprobs);
  }
  // A prompt token's modelled distribution depends on it and the one before (not the request).
  for (const prompt_row& r : plan_prompt_rows(plan, sched, out.prompt_logprobs)) {
    auto& part = out.prompt_logprobs[r.part];
    const seq_status* s = sched.find(part.id);
    const auto at = static_cast<std::size_t>(part.first_position) + part.rows.size();
    const auto seed = mix64(static_cast<std::uint64_t>(r.next) ^ mix64(static_cast<std::uint64_t>(s->tokens[at - 1]) + 0x9e37));
    part.rows.push_back(modelled_logprobs(seed, r.next, r.top));
  }
  return out;
}

}  // namespace kiln::engine
