#include "engine/scheduler.hpp"

#include <algorithm>

namespace kiln::engine {

void scheduler::add(seq_id id, priority prio, int prompt_len, int max_tokens) {
  seq_status s;
  s.id = id;
  s.prio = prio;
  s.prompt_len = std::max(1, prompt_len);
  s.max_tokens = std::max(1, max_tokens);
  s.arrival = next_arrival_++;
  seqs_[id] = s;
}

bool scheduler::remove(seq_id id) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return false;
  if (it->second.running) --running_count_;
  seqs_.erase(it);
  return true;
}

const seq_status* scheduler::find(seq_id id) const {
  auto it = seqs_.find(id);
  return it == seqs_.end() ? nullptr : &it->second;
}

std::int64_t scheduler::tokens_in_flight() const {
  std::int64_t n = 0;
  for (const auto& [id, s] : seqs_) n += s.prompt_len + (s.max_tokens - s.generated);
  return n;
}

step_plan scheduler::schedule() {
  step_plan plan;
  int budget = limits_.max_tokens_per_step;
  // Order: tier first, then arrival; running sequences keep their slot.
  std::vector<seq_status*> order;
  order.reserve(seqs_.size());
  for (auto& [id, s] : seqs_) order.push_back(&s);
  std::sort(order.begin(), order.end(), [](const seq_status* a, const seq_status* b) {
    if (a->prio != b->prio) return a->prio < b->prio;
    return a->arrival < b->arrival;
  });
  // 1. Decodes of running sequences: one token each, so streams keep flowing.
  for (seq_status* s : order) {
    if (budget == 0) break;
    if (!s->running || s->prefilled < s->prompt_len) continue;
    plan.items.push_back({s->id, 1, s->prompt_len + s->generated - 1, false, true});
    ++plan.decode_tokens;
    --budget;
  }
  // 2. Prompt chunks: running sequences mid-prefill, then admission of waiting ones.
  for (int pass = 0; pass < 2; ++pass) {
    for (seq_status* s : order) {
      if (budget == 0) break;
      const bool admit = pass == 1;
      if (s->running == admit) continue;
      if (s->running && s->prefilled >= s->prompt_len) continue;
      if (admit && running_count_ >= limits_.max_running) break;
      const int chunk = std::min(budget, s->prompt_len - s->prefilled);
      const bool last = s->prefilled + chunk == s->prompt_len;
      plan.items.push_back({s->id, chunk, s->prefilled, true, last});
      plan.prefill_tokens += chunk;
      budget -= chunk;
      if (admit) {
        s->running = true;
        ++running_count_;
      }
    }
  }
  return plan;
}

void scheduler::update(const step_plan& plan) {
  for (const plan_item& item : plan.items) {
    auto it = seqs_.find(item.id);
    if (it == seqs_.end()) continue;  // removed while the step ran
    seq_status& s = it->second;
    if (item.prefill) s.prefilled = std::min(s.prompt_len, s.prefilled + item.tokens);
    if (item.samples) ++s.generated;
  }
}

}  // namespace kiln::engine
