#pragma once
// Continuous-batching scheduler: schedule() builds the next step's plan under a per-step
// token budget and a cap on running sequences; update() applies what the executor ran.
// Pure bookkeeping: it never calls an executor.
#include <cstdint>
#include <deque>
#include <map>
#include <vector>

#include "engine/types.hpp"

namespace kiln::engine {

struct scheduler_limits {
  int max_tokens_per_step = 2048;  ///< prefill + decode tokens computed in one step
  int max_running = 256;           ///< sequences holding a batch slot at once
};

/// One sequence's work in a step.
struct plan_item {
  seq_id id = 0;
  int tokens = 0;          ///< tokens computed: a prefill chunk, or 1 for a decode
  int context_before = 0;  ///< tokens already in the KV cache before this step
  bool prefill = false;    ///< a chunk of the prompt (the last chunk also samples)
  bool samples = false;    ///< produces a new token this step
};

struct step_plan {
  std::vector<plan_item> items;
  int prefill_tokens = 0;
  int decode_tokens = 0;
  bool empty() const { return items.empty(); }
  int total_tokens() const { return prefill_tokens + decode_tokens; }
};

/// Scheduler's view of one sequence.
struct seq_status {
  seq_id id = 0;
  priority prio = priority::standard;
  int prompt_len = 0;
  int max_tokens = 0;
  int prefilled = 0;   ///< prompt tokens already in the KV cache
  int generated = 0;   ///< tokens sampled so far
  bool running = false;
  std::uint64_t arrival = 0;
};

class scheduler {
 public:
  explicit scheduler(scheduler_limits limits) : limits_(limits) {}

  /// Queues a sequence; it joins the batch at a later schedule().
  void add(seq_id id, priority prio, int prompt_len, int max_tokens);
  /// Removes a sequence wherever it is; false if unknown.
  bool remove(seq_id id);

  step_plan schedule();
  /// Applies a plan the executor ran: prompt chunks are cached, sampled tokens counted.
  void update(const step_plan& plan);

  int running() const { return running_count_; }
  int waiting() const { return static_cast<int>(seqs_.size()) - running_count_; }
  /// Prompt plus remaining output tokens of every sequence held (the router's load measure).
  std::int64_t tokens_in_flight() const;
  const seq_status* find(seq_id id) const;
  const scheduler_limits& limits() const { return limits_; }

 private:
  scheduler_limits limits_;
  std::map<seq_id, seq_status> seqs_;
  int running_count_ = 0;
  std::uint64_t next_arrival_ = 0;
};

}  // namespace kiln::engine
