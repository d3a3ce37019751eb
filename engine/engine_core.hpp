#pragma once
// One engine: scheduler + executor + tokenizer. step() runs one continuous-batching step
// and returns each sequence's new text, finish reason and usage. No actors, no clock.
#include <algorithm>
#include <cstdint>
#include <functional>
#include <optional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/executor.hpp"
#include "engine/logit_adjust.hpp"
#include "engine/step_worker.hpp"
#include "engine/scheduler.hpp"
#include "engine/token_list.hpp"
#include "engine/tokenizer.hpp"

namespace kiln::engine {

class sim_executor;

struct engine_request {
  seq_id id = 0;
  token_list prompt;
  sampling_params sampling;
  priority prio = priority::standard;
  std::uint64_t cache_salt = 0;  ///< prefix-cache partition, derived by the server from the team
};

/// Paged KV geometry of one engine.
struct kv_geometry {
  int num_blocks = 4096;  ///< including the null block
  int block_size = 16;
};

/// What one sequence produced in a step.
struct seq_output {
  seq_id id = 0;
  std::string text;      ///< text safe to stream now (held back while it may start a stop string)
  int new_tokens = 0;
  finish_reason finish = finish_reason::none;
  engine::usage usage;   ///< running totals; final when finish != none
  std::vector<token_logprob> logprobs;         ///< the step's tokens' (sampling.logprobs >= 0; eos left out)
  std::vector<token_logprob> prompt_logprobs;  ///< every prompt token's, once, with the first output
};

struct step_result {
  double seconds = 0;    ///< the executor's step time
  int batch_size = 0;    ///< sequences in the step
  std::vector<seq_output> outputs;
  /// Quiet steps (an engine without text: a coast, or a step where every sequence that has
  /// started its answer decodes): each sequence that has started and has no output here
  /// decoded this many tokens, one a step. Outputs come only for a first token, an end,
  /// log-probabilities, and a request with stop strings (its text may be held back).
  int quiet_steps = 0;
  std::string error;     ///< the executor failed: nothing advanced
};

class engine_core {
 public:
  /// `salt` varies unseeded sampling between engines.
  engine_core(scheduler_limits limits, kv_geometry kv, std::unique_ptr<executor> exec,
              std::shared_ptr<const tokenizer> tok, std::uint64_t salt = 0);

  /// Queues a request; false when its prompt can never fit in this engine's KV cache.
  bool add(engine_request req);
  /// Drops a sequence: it produces nothing more, and its blocks and accounting are freed at
  /// once (or, while a step runs, as soon as it ends). False if unknown.
  bool cancel(seq_id id);
  bool idle() const { return seqs_.empty(); }

  /// One step on the calling thread.
  step_result step();
  /// Starts a step on the engine's worker thread; `done` runs there when it has finished and
  /// end_step() collects it. When there is nothing to launch, the result (it may still end
  /// sequences that outgrew the KV pool) comes back at once and `done` never runs.
  std::optional<step_result> begin_step(std::function<void()> done);
  step_result end_step();
  bool in_flight() const { return in_flight_; }

  /// Steady decode on a modelled executor (the simulator): the modelled seconds of each of the
  /// next steps while nothing waits, every running sequence decodes and none has stop strings,
  /// up to and including the first step that ends a sequence (at most `max_steps`); empty when
  /// the next step is not one of these.
  std::vector<double> coast_times(int max_steps) const;
  /// coast_times() into `times` (cleared first), whose room a caller keeps between coasts.
  void coast_times(int max_steps, std::vector<double>& times) const;
  /// Runs `steps` such steps at once, as that many step() calls would but without text: an
  /// output for each sequence that ends (only the last step ends sequences) and for the others
  /// only the count, `quiet_steps` (each decoded one token a step).
  step_result coast(int steps);
  /// coast(steps) then coast(1) in one pass over the batch, as two results: the first
  /// `steps` steps' tokens (`steps` short of the coast's end, so nothing finishes in them),
  /// then the next step's.
  std::pair<step_result, step_result> coast_and_one(int steps);
  /// What coast(steps) would leave (`steps` short of the coast's end, so nothing finishes in
  /// them), read without running it: each running sequence then holds `steps` more tokens.
  struct coast_view {
    std::int64_t tokens_in_flight = 0;
    int kv_blocks_free = 0;
  };
  coast_view coast_ahead(int steps) const {
    return {sched_.tokens_in_flight() - static_cast<std::int64_t>(sched_.running()) * steps,
            sched_.pool().num_free() - sched_.blocks_for_decode(steps)};
  }

  /// Off: answers carry token counts only, no text (stop strings still end them), and steps
  /// are quiet where they can be (step_result::quiet_steps). The simulator's engines, whose
  /// clients count tokens.
  void set_text(bool on) { text_ = on; }

  int running() const { return sched_.running(); }
  int waiting() const { return sched_.waiting(); }
  std::int64_t tokens_in_flight() const { return sched_.tokens_in_flight(); }
  std::uint64_t preemptions() const { return sched_.preemptions(); }
  const scheduler& sched() const { return sched_; }
  const executor& exec() const { return *exec_; }
  const tokenizer& tok() const { return *tok_; }

 private:
  struct sequence {
    engine_request req;
    std::uint64_t rng_seed = 0;
    std::uint64_t answer_seed = 0;  ///< what a modelled answer depends on: prompt and seed
    std::string text;        ///< decoded text not yet returned, after the returned bytes a stop string may begin in
    std::size_t emitted = 0; ///< bytes of text already returned
    int generated = 0;
    mutable int cached_tokens = -1;  ///< once admitted, what its first admission found cached
    std::vector<logprob_row> prompt_lp;  ///< prompt_logprobs: by position (1..), filled as prefill runs
    bool prompt_lp_sent = false;
    std::unique_ptr<token_tally> tally;  ///< what its penalties look at (requests that adjust logits only)
  };
  /// Schedules the next step into plan_/slots_; sequences that outgrew the pool end in
  /// `result`. False when there is nothing to run.
  bool prepare(step_result& result);
  /// Applies what the executor produced for plan_.
  void apply(const step_execution& exec, step_result& result);
  /// Whether plan_'s step (applied to the scheduler) is quiet: no text, and every sequence
  /// that has started its answer sampled in it.
  bool quiet_step() const;
  void apply_deferred();
  seq_output advance(sequence& s, token_id tok, const logprob_row* lp = nullptr);
  /// Drops returned text that no stop string can still begin in.
  void forget_emitted(sequence& s);
  token_logprob named(const logprob_row& row) const;
  void keep_prompt_logprobs(const prompt_logprobs_part& part);
  void attach_prompt_logprobs(sequence& s, seq_output& out);
  /// Ends a sequence that cannot go on (it outgrew the KV pool) with `length`.
  seq_output cut_short(sequence& s);
  engine::usage usage_of(const sequence& s) const;
  /// What the scheduler keeps as the sequence's seq_status::coast_end.
  int coast_end(const sequence& s) const;

  /// coast()'s working buffers: the batch in serving order, and its sequences.
  struct coast_scratch {
    std::vector<const seq_status*> order;
    std::vector<sequence*> batch;
  };

  scheduler sched_;
  coast_scratch coast_;
  /// A sequence's record, from the scheduler's view of it (kept there, else looked up).
  const sequence* record_of(const seq_status& st) const;
  /// `first + last` coasted steps; with `head`, the first steps' tokens go there and the
  /// result holds the last steps'.
  step_result coast_split(int first, int last, step_result* head);
  std::unique_ptr<executor> exec_;
  const sim_executor* sim_;  ///< exec_ when it is the simulator's (modelled answers, coasting)
  std::shared_ptr<const tokenizer> tok_;
  std::uint64_t salt_;
  std::vector<token_id> stops_;  ///< the tokenizer's stop_ids(): eos, then the model's other end tokens
  token_id eos_;
  /// Whether sampling `t` ends an answer (unless it ignores eos).
  bool ends_answer(token_id t) const {
    return t == eos_ || (stops_.size() > 1 && std::find(stops_.begin() + 1, stops_.end(), t) != stops_.end());
  }
  std::uint64_t unseeded_ = 0;
  std::unordered_map<seq_id, sequence> seqs_;
  // the step in progress
  step_plan plan_;
  std::vector<sample_slot> slots_;
  std::vector<logit_adjust> adjust_;  ///< the slots' logit adjustments, each slot's a range
  step_result pending_;
  step_execution exec_result_;
  bool in_flight_ = false;
  bool text_ = true;
  std::vector<engine_request> deferred_adds_;  ///< arrived while a step ran
  std::vector<seq_id> deferred_removes_;
  std::unique_ptr<step_worker> worker_;        ///< made on the first begin_step
};

/// Bytes of `text` (from `from` on) that may be emitted without cutting a stop string or a
/// UTF-8 character; sets `hit` to the index of a stop string found, or npos.
std::size_t safe_emit_end(const std::string& text, std::size_t from,
                          const std::vector<std::string>& stop, std::size_t& hit);

}  // namespace kiln::engine
