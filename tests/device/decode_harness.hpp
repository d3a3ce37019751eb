#pragma once
// Drives an executor through a scheduler until every sequence is done: the loop the device
// programs share. Greedy unless told otherwise.
#include <chrono>
#include <map>
#include <vector>

#include "engine/executor.hpp"
#include "engine/scheduler.hpp"

namespace kiln::device {

struct decode_run {
  std::map<engine::seq_id, std::vector<engine::token_id>> tokens;
  std::string error;
  int steps = 0;
};

/// Runs until idle (or `max_steps`); returns what each sequence sampled.
inline decode_run drive(engine::scheduler& sched, engine::executor& exec, int max_steps = 100000) {
  decode_run r;
  while (sched.running() + sched.waiting() > 0 && r.steps < max_steps) {
    const engine::step_plan plan = sched.schedule();
    std::vector<engine::sample_slot> slots;
    for (const auto& item : plan.items)
      if (item.samples) slots.push_back({item.id, 1, sched.find(item.id)->generated, 0.0});
    const auto out = exec.run(plan, sched, slots);
    if (!out.error.empty()) {
      r.error = out.error;
      return r;
    }
    sched.update(plan, out.tokens);
    for (std::size_t i = 0; i < slots.size(); ++i) r.tokens[slots[i].id].push_back(out.tokens[i]);
    for (const auto& s : slots) {
      const auto* st = sched.find(s.id);
      if (st && st->generated >= st->max_tokens) sched.remove(s.id);
    }
    ++r.steps;
  }
  return r;
}

}  // namespace kiln::device
