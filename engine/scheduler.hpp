#pragma once
// Continuous-batching scheduler over a paged KV pool. schedule() builds the next step's plan
// under a per-step token budget and a cap on running sequences, admitting waiting sequences
// (tier first) when their blocks plus a reserve fit, sharing cached prefix blocks, and
// preempting by recompute when decoding outgrows the pool. update() applies what the
// executor ran. Pure bookkeeping: it never calls an executor.
#include <cstdint>
#include <functional>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "engine/kv_block_pool.hpp"
#include "engine/types.hpp"

namespace kiln::engine {

struct scheduler_limits {
  int max_tokens_per_step = 2048;  ///< tokens computed in one step (prefill chunks + decodes)
  int max_running = 256;           ///< sequences holding a batch slot at once
  int kv_reserve_blocks = 0;       ///< free blocks that must remain when a sequence is admitted
  /// > 0: while interactive or standard sequences run or wait, batch-tier prompt chunks join a
  /// step only until it computes this many tokens in all (a GPU's step is bound by reading the
  /// weights below that, so batch work rides along without lengthening the online work's
  /// step). 0: batch prompt chunks take whatever the step budget leaves.
  int batch_step_tokens = 0;
};

struct seq_status;

/// One sequence's work in a step.
struct plan_item {
  seq_id id = 0;
  int tokens = 0;          ///< tokens computed: a prompt chunk, or 1 for a decode
  int context_before = 0;  ///< tokens already in the KV cache before this step
  bool prefill = false;    ///< prompt (or recompute) tokens rather than a decode
  bool samples = false;    ///< produces a new token this step
  /// >= 0: the executor also returns each row's next prompt token's log-probability, with
  /// this many alternatives (prompt_logprobs_part)
  int prompt_logprobs = -1;
  /// The scheduler's record of the sequence, valid until the plan's update() (one removed
  /// meanwhile is kept, no longer running, until then).
  seq_status* status = nullptr;
};

struct step_plan {
  std::vector<plan_item> items;
  int prefill_tokens = 0;
  int decode_tokens = 0;
  bool empty() const { return items.empty(); }
  int total_tokens() const { return prefill_tokens + decode_tokens; }
};

/// Scheduler's view of one sequence. What every pass over the batch reads (a coast's, a
/// step's) is in its first 64 bytes, and the record starts a cache line: a batch of cold
/// records costs one miss per sequence for those passes, not three.
struct alignas(64) seq_status {
  std::vector<token_id> tokens;  ///< prompt, then every sampled token
  std::vector<block_id> blocks;  ///< block table
  int computed = 0;              ///< tokens whose K/V are in the cache
  int generated = 0;
  int prompt_len = 0;
  /// The caller's: the `generated` count at which the sequence ends while it decodes steadily
  /// (its length limit or its modelled answer's end); 0 when it cannot be run ahead (stop
  /// strings, log-probabilities, or not known).
  int coast_end = 0;
  // -- the second line: keys and what a step's plan and its update read
  std::vector<block_hash> keys;  ///< cache keys of the table's full blocks, in order
  seq_id id = 0;
  void* user = nullptr;  ///< the caller's own record of the sequence (engine_core's), kept for it
  int max_tokens = 0;
  int progress_mark = 0;         ///< `generated` when last preempted
  priority prio = priority::standard;
  bool running = false;
  bool admitted_once = false;
  bool guarded = false;          ///< preempted and not yet progressed: cannot be preempted again
  int preemptions = 0;
  int cached_tokens = 0;         ///< prompt tokens found in the prefix cache at first admission
  std::uint64_t key_seed = 0;    ///< salt_seed() of its prefix-cache partition (the team's salt)
  std::uint64_t arrival = 0;
  std::uint64_t admitted_at = 0;
};

class scheduler {
 public:
  scheduler(scheduler_limits limits, int num_blocks, int block_size);

  /// Queues a sequence; it joins the batch at a later schedule(). False (and nothing queued)
  /// when its prompt could never fit in the pool.
  bool add(seq_id id, priority prio, std::vector<token_id> prompt, int max_tokens, std::uint64_t salt = 0);
  /// Whether a prompt of this length fits the pool at all (what add() checks).
  bool can_ever_fit(int prompt_len) const {
    return prompt_len > 0 && blocks_for(prompt_len) + limits_.kv_reserve_blocks <= pool_.capacity();
  }
  /// Removes a sequence wherever it is and frees its blocks at once; false if unknown.
  bool remove(seq_id id);

  step_plan schedule();
  /// Applies a plan the executor ran; `sampled` has one token per sampling item, in order.
  /// A sequence removed since the plan was made is skipped.
  void update(const step_plan& plan, std::span<const token_id> sampled);

  /// Sequences that outgrew the whole pool (they could never run again): the caller ends
  /// them (finish "length") and removes them. Emptied by the call.
  std::vector<seq_id> take_overflowed() { return std::exchange(overflowed_, {}); }

  int running() const { return static_cast<int>(running_.size()); }
  int waiting() const { return static_cast<int>(waiting_.size()); }
  /// Prompt plus remaining output tokens of every sequence held (the router's load measure),
  /// kept as sequences come, grow and go.
  std::int64_t tokens_in_flight() const { return in_flight_; }
  std::uint64_t preemptions() const { return preemptions_; }
  const seq_status* find(seq_id id) const;
  /// Keeps the caller's record of a sequence with it (seq_status::user and coast_end); nothing
  /// if unknown.
  void set_user(seq_id id, void* user, int coast_end = 0);

  // Steady decode, for modelled executors that run several steps between events: while
  // nothing waits and every running sequence decodes, the next steps are known in advance.

  /// The running sequences in the order a step serves them (tier, then admission), in place:
  /// valid until a sequence joins, leaves or is preempted.
  std::span<const seq_status* const> running_view() const { return {running_.data(), running_.size()}; }
  /// The waiting sequences in admission order, in place (the same validity).
  std::span<const seq_status* const> waiting_view() const { return {waiting_.data(), waiting_.size()}; }
  /// Whether the next step is decodes only: nothing waiting, every running sequence decoding,
  /// a token of the step's budget for each.
  bool steady_decode() const;
  /// Blocks that `steps` more decodes of every running sequence take from the pool.
  int blocks_for_decode(int steps) const;
  /// Steady decode's next stretch, from one walk of the batch: the steps (at most `max_steps`)
  /// until the first running sequence reaches its coast_end, the step that reaches it
  /// included, and the tokens the batch holds in the KV cache. 0 steps when the next step is
  /// not steady decode.
  struct coast_span {
    int steps = 0;
    std::int64_t kv_tokens = 0;
  };
  coast_span next_coast(int max_steps) const;
  /// Fills `out` with a running sequence's next tokens: the i-th of running_view(), from
  /// the position given by its tokens generated so far.
  using token_run_fn = std::function<void(std::size_t i, int first_position, std::span<token_id> out)>;
  /// Runs `steps` decode steps exactly as schedule() and update() would, each sequence's
  /// tokens given by `tokens`. Only while steady_decode() holds, with blocks_for_decode(steps)
  /// blocks free (nothing is preempted).
  void bulk_decode(int steps, const token_run_fn& tokens);
  const scheduler_limits& limits() const { return limits_; }
  const kv_block_pool& pool() const { return pool_; }

 private:
  /// Nothing waits and the whole batch fits one step: what steady decode asks of the batch
  /// before it looks at each sequence.
  bool batch_may_decode() const;
  int blocks_for(int tokens) const;
  bool admit(seq_status& s, step_plan& plan, int& budget);
  /// Frees blocks until `needed` are free by preempting running sequences of tier
  /// `lowest_victim` or lower, lowest tier and latest admitted first, never a guarded one.
  /// `self` may be chosen too; false if it was, or if the room cannot be made.
  bool make_room(int needed, const seq_status* self, priority lowest_victim, step_plan& plan, int& budget);
  void preempt(seq_status& v, step_plan& plan, int& budget);
  /// The cache key of block `j` of `s`, after its parent's key.
  block_hash block_key(const seq_status& s, std::size_t j, block_hash parent) const;
  /// Appends the keys of the blocks `computed` has filled since the last call; returns the
  /// index of the first new one.
  std::size_t key_full_blocks(seq_status& s);
  void publish_full_blocks(seq_status& s);
  /// A copy of the running (or waiting) order that schedule() walks while it changes the
  /// order itself; kept in a member so that a step allocates nothing for it.
  const std::vector<seq_status*>& ordered(bool running);

  /// A sequence's block change at a step of a stretch: a block it grows into, or one it fills
  /// (`key`: the filled block's key, an index into `ahead`).
  struct bulk_event {
    std::uint32_t step = 0;
    std::uint32_t seq = 0;  ///< index into the batch's serving order
    std::uint32_t key = 0;
  };
  /// bulk_decode()'s working buffers.
  struct bulk_scratch {
    std::vector<block_id> more, full_blocks;
    std::vector<block_hash> full_keys, ahead;
    std::vector<bulk_event> grows, fills, spare;
    std::vector<std::uint32_t> grow_starts, fill_starts;  ///< per step, where its events begin
  };

  scheduler_limits limits_;
  kv_block_pool pool_;
  bulk_scratch bulk_;
  std::unordered_map<seq_id, seq_status> seqs_;  ///< node-based: the orders below point into it
  /// Removed while a plan was out (its items point at them): freed at the plan's update().
  std::vector<std::unordered_map<seq_id, seq_status>::node_type> retired_;
  bool planned_ = false;
  std::vector<seq_status*> run_walk_, wait_walk_;  ///< ordered()'s copies
  std::vector<seq_status*> running_;   ///< in serving order: tier, then admission
  std::vector<seq_status*> waiting_;   ///< in admission order: tier, then arrival
  std::uint64_t next_arrival_ = 0;
  std::uint64_t next_admission_ = 0;
  std::uint64_t preemptions_ = 0;
  std::int64_t in_flight_ = 0;
  std::vector<seq_id> overflowed_;
};

}  // namespace kiln::engine
