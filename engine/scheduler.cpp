#include "engine/scheduler.hpp"

#include <algorithm>

namespace kiln::engine {

scheduler::scheduler(scheduler_limits limits, int num_blocks, int block_size)
    : limits_(limits), pool_(num_blocks, block_size) {}

int scheduler::blocks_for(int tokens) const {
  return (tokens + pool_.block_size() - 1) / pool_.block_size();
}

namespace {

// Running: tier, then admission order. Waiting: tier, then arrival.
bool runs_before(const seq_status* a, const seq_status* b) {
  return a->prio != b->prio ? a->prio < b->prio : a->admitted_at < b->admitted_at;
}
bool waits_before(const seq_status* a, const seq_status* b) {
  return a->prio != b->prio ? a->prio < b->prio : a->arrival < b->arrival;
}

void enter(std::vector<seq_status*>& order, seq_status* s, bool (*before)(const seq_status*, const seq_status*)) {
  order.insert(std::upper_bound(order.begin(), order.end(), s, before), s);
}
void leave(std::vector<seq_status*>& order, const seq_status* s) {
  if (auto it = std::find(order.begin(), order.end(), s); it != order.end()) order.erase(it);
}

}  // namespace

bool scheduler::add(seq_id id, priority prio, std::vector<token_id> prompt, int max_tokens, std::uint64_t salt) {
  if (!can_ever_fit(static_cast<int>(prompt.size()))) return false;
  remove(id);  // a reused id replaces what it named
  seq_status& s = seqs_[id];
  s.id = id;
  s.prio = prio;
  s.prompt_len = static_cast<int>(prompt.size());
  s.tokens = std::move(prompt);
  s.max_tokens = std::max(1, max_tokens);
  s.key_seed = salt_seed(salt);
  s.arrival = next_arrival_++;
  in_flight_ += s.prompt_len + s.max_tokens;
  enter(waiting_, &s, waits_before);
  return true;
}

bool scheduler::remove(seq_id id) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return false;
  leave(it->second.running ? running_ : waiting_, &it->second);
  in_flight_ -= it->second.prompt_len + (it->second.max_tokens - it->second.generated);
  pool_.release_all(it->second.blocks);
  if (planned_) {
    // The plan out for the step points at it: kept (not running) until the plan's update().
    it->second.running = false;
    retired_.push_back(seqs_.extract(it));
  } else {
    seqs_.erase(it);
  }
  return true;
}

const seq_status* scheduler::find(seq_id id) const {
  auto it = seqs_.find(id);
  return it == seqs_.end() ? nullptr : &it->second;
}

void scheduler::set_user(seq_id id, void* user, int coast_end) {
  if (auto it = seqs_.find(id); it != seqs_.end()) {
    it->second.user = user;
    it->second.coast_end = user ? coast_end : 0;
  }
}

const std::vector<seq_status*>& scheduler::ordered(bool running) {
  auto& walk = running ? run_walk_ : wait_walk_;
  walk = running ? running_ : waiting_;  // assignment keeps the copy's capacity
  return walk;
}

namespace {
// In steady decode, this sequence's next step computes its last sampled token.
bool decodes_next(const seq_status& s) { return s.computed >= s.prompt_len && s.computed + 1 == static_cast<int>(s.tokens.size()); }
}  // namespace

bool scheduler::batch_may_decode() const {
  return !running_.empty() && waiting_.empty() && running() <= limits_.max_tokens_per_step;
}

bool scheduler::steady_decode() const {
  return batch_may_decode() && std::all_of(running_.begin(), running_.end(), [](const seq_status* s) { return decodes_next(*s); });
}

scheduler::coast_span scheduler::next_coast(int max_steps) const {
  coast_span span;
  if (!batch_may_decode()) return span;
  int steps = max_steps;
  for (const seq_status* s : running_) {
    if (!decodes_next(*s)) return span;
    steps = std::min(steps, s->coast_end - s->generated);
    span.kv_tokens += s->computed;
  }
  span.steps = std::max(0, steps);
  return span;
}

int scheduler::blocks_for_decode(int steps) const {
  int n = 0;
  for (const seq_status* s : running_)
    n += std::max(0, blocks_for(s->computed + steps) - static_cast<int>(s->blocks.size()));
  return n;
}

namespace {

// Orders a stretch's events by step, keeping their order within a step (a counting sort
// through `spare`); starts[k] .. starts[k + 1] are then step k's.
template <class Event>
void by_step(std::vector<Event>& events, int steps, std::vector<Event>& spare, std::vector<std::uint32_t>& starts) {
  starts.assign(static_cast<std::size_t>(steps) + 1, 0);
  for (const auto& e : events) ++starts[e.step + 1];
  for (int k = 0; k < steps; ++k) starts[static_cast<std::size_t>(k) + 1] += starts[static_cast<std::size_t>(k)];
  spare.resize(events.size());
  for (const auto& e : events) spare[starts[e.step]++] = e;
  for (int k = steps; k > 0; --k) starts[static_cast<std::size_t>(k)] = starts[static_cast<std::size_t>(k) - 1];
  starts[0] = 0;
  std::swap(events, spare);
}

}  // namespace

void scheduler::bulk_decode(int steps, const token_run_fn& tokens) {
  // Nothing joins or leaves the batch until the coast ends, so its order is read in place.
  const std::vector<seq_status*>& order = running_;
  const auto n = order.size();
  const auto bs = static_cast<std::size_t>(pool_.block_size());
  // A stretch of steps at a time: each sequence's tokens for it are made first (pure
  // functions of the sequence and position; in steady decode a step computes exactly the
  // token before the one it samples, so tokens past `computed` change nothing), and with
  // them the keys of the blocks the stretch fills, whose index slots are then fetched
  // together. A decode step changes a sequence's blocks only where it crosses a block
  // boundary, so the stretch's steps visit just those sequences: at each step, the ones
  // growing into a block take them in serving order (one allocation for the step, as
  // schedule() would), then the ones that filled a block are keyed in that order (as
  // update() would). The coast was planned with the blocks it needs free, so no allocation
  // here fails.
  constexpr int kStretch = 64;
  // The batch's records are cold (other engines ran since this one's last step): where the
  // stretch appends to each is fetched for all of them first, so the misses overlap.
  for (const seq_status* s : order) {
    __builtin_prefetch(s->tokens.data() + s->tokens.size(), 1);
    __builtin_prefetch(s->blocks.data() + s->blocks.size(), 1);
    if (!s->keys.empty()) __builtin_prefetch(&s->keys.back());
  }
  auto& [more, full_blocks, full_keys, ahead, grows, fills, spare, grow_starts, fill_starts] = bulk_;  // kept: no allocation per step
  for (int from = 0; from < steps; from += kStretch) {
    const int len = std::min(kStretch, steps - from);
    ahead.clear();
    grows.clear();
    fills.clear();
    for (std::size_t i = 0; i < n; ++i) {
      seq_status& s = *order[i];
      const std::size_t had = s.tokens.size();
      s.tokens.resize(had + static_cast<std::size_t>(len));
      tokens(i, s.generated, std::span(s.tokens).subspan(had));
      const auto c0 = static_cast<std::size_t>(s.computed), end = c0 + static_cast<std::size_t>(len);
      // Step k computes token c0 + k: it needs room for c0 + k + 1 tokens, and fills block j
      // once c0 + k + 1 reaches (j + 1) * bs.
      for (std::size_t b = s.blocks.size(); b * bs < end; ++b)
        grows.push_back({static_cast<std::uint32_t>(b * bs > c0 ? b * bs - c0 : 0), static_cast<std::uint32_t>(i), 0});
      block_hash parent = s.keys.empty() ? 0 : s.keys.back();
      for (std::size_t j = s.keys.size(); (j + 1) * bs <= end; ++j) {
        parent = block_key(s, j, parent);
        fills.push_back({static_cast<std::uint32_t>((j + 1) * bs > c0 + 1 ? (j + 1) * bs - c0 - 1 : 0),
                         static_cast<std::uint32_t>(i), static_cast<std::uint32_t>(ahead.size())});
        ahead.push_back(parent);
        pool_.prefetch(parent);
      }
    }
    by_step(grows, len, spare, grow_starts);
    by_step(fills, len, spare, fill_starts);
    for (int k = 0; k < len; ++k) {
      const auto g0 = grow_starts[static_cast<std::size_t>(k)], g1 = grow_starts[static_cast<std::size_t>(k) + 1];
      if (g1 > g0) {
        more.clear();
        pool_.allocate_into(static_cast<int>(g1 - g0), more);
        for (std::size_t g = 0; g < more.size(); ++g) order[grows[g0 + g].seq]->blocks.push_back(more[g]);
      }
      const auto f0 = fill_starts[static_cast<std::size_t>(k)], f1 = fill_starts[static_cast<std::size_t>(k) + 1];
      if (f1 == f0) continue;
      full_blocks.clear();
      full_keys.clear();
      for (auto f = f0; f < f1; ++f) {
        seq_status& s = *order[fills[f].seq];
        full_blocks.push_back(s.blocks[s.keys.size()]);
        s.keys.push_back(ahead[fills[f].key]);
        full_keys.push_back(s.keys.back());
      }
      pool_.cache_all(full_blocks, full_keys);
    }
    for (seq_status* s : order) {
      s->computed += len;
      s->generated += len;
      if (s->generated > s->progress_mark) s->guarded = false;
    }
    in_flight_ -= static_cast<std::int64_t>(n) * len;
  }
}

void scheduler::preempt(seq_status& v, step_plan& plan, int& budget) {
  // Drop its work from this step's plan, if any, and return the budget.
  auto it = std::find_if(plan.items.begin(), plan.items.end(), [&](const plan_item& i) { return i.id == v.id; });
  if (it != plan.items.end()) {
    (it->prefill ? plan.prefill_tokens : plan.decode_tokens) -= it->tokens;
    budget += it->tokens;
    plan.items.erase(it);
  }
  // Full blocks keep their cache keys, so a readmission may find them again.
  pool_.release_all(v.blocks);
  v.blocks.clear();
  v.keys.clear();
  v.computed = 0;
  v.running = false;
  leave(running_, &v);
  enter(waiting_, &v, waits_before);
  v.guarded = true;
  v.progress_mark = v.generated;
  ++v.preemptions;
  ++preemptions_;
}

bool scheduler::make_room(int needed, const seq_status* self, priority lowest_victim, step_plan& plan, int& budget) {
  while (pool_.num_free() < needed) {
    // The last running sequence in serving order that may be preempted: lowest tier, latest
    // admitted.
    seq_status* victim = nullptr;
    for (auto it = running_.rbegin(); it != running_.rend() && !victim; ++it)
      if (!(*it)->guarded && (*it)->prio >= lowest_victim) victim = *it;
    if (!victim) return false;
    preempt(*victim, plan, budget);
    if (victim == self) return false;
  }
  return true;
}

bool scheduler::admit(seq_status& s, step_plan& plan, int& budget) {
  // Longest cached prefix of full blocks; the last prompt token is always computed.
  const int bs = pool_.block_size();
  const int total = static_cast<int>(s.tokens.size());
  if (blocks_for(total) > pool_.capacity()) return false;  // overflowed: see schedule()
  // The block table and its keys get room for the prompt and the answer's blocks at once
  // (at most 256 more for the answer), so they do not regrow block by block.
  const auto room = static_cast<std::size_t>(blocks_for(total) + std::min(blocks_for(std::max(1, s.max_tokens - s.generated)), 256));
  std::vector<block_id> hits;
  std::vector<block_hash> keys;
  hits.reserve(room);
  keys.reserve(room);
  // Keys a few blocks ahead of the lookups, so their index reads overlap.
  constexpr int kAhead = 8;
  const int full = std::max(0, (total - 1) / bs);
  block_hash parent = 0;
  for (int from = 0; from < full && static_cast<int>(hits.size()) == from; from += kAhead) {
    const int to = std::min(full, from + kAhead);
    for (int i = from; i < to; ++i) {
      const auto block = std::span(s.tokens).subspan(static_cast<std::size_t>(i * bs), static_cast<std::size_t>(bs));
      parent = chain_hash_seeded(parent, s.key_seed, block);
      keys.push_back(parent);
      pool_.prefetch(parent);
    }
    for (int i = from; i < to; ++i) pool_.prefetch_record(keys[static_cast<std::size_t>(i)]);
    for (int i = from; i < to; ++i) {
      const auto hit = pool_.lookup(keys[static_cast<std::size_t>(i)]);
      if (!hit) break;
      hits.push_back(*hit);
    }
  }
  keys.resize(hits.size());
  const int fresh = blocks_for(total) - static_cast<int>(hits.size());
  const int hits_now_free =
      static_cast<int>(std::count_if(hits.begin(), hits.end(), [&](block_id b) { return pool_.is_free(b); }));
  // The reserve keeps room for running sequences to grow; with none running it protects nothing.
  const int needed = fresh + hits_now_free + (!running_.empty() ? limits_.kv_reserve_blocks : 0);
  if (pool_.num_free() < needed) {
    // An interactive sequence may take room from running batch work; nothing else may.
    if (s.prio != priority::interactive || !make_room(needed, nullptr, priority::batch, plan, budget)) return false;
  }
  for (block_id b : hits) pool_.ref(b);
  s.blocks = std::move(hits);
  pool_.allocate_into(fresh, s.blocks);
  s.keys = std::move(keys);
  s.computed = static_cast<int>(s.keys.size()) * bs;
  if (!s.admitted_once) s.cached_tokens = s.computed;
  s.admitted_once = true;
  s.running = true;
  s.admitted_at = next_admission_++;
  leave(waiting_, &s);
  enter(running_, &s, runs_before);
  return true;
}

step_plan scheduler::schedule() {
  retired_.clear();  // an earlier plan that was never applied points at none of them now
  step_plan plan;
  plan.items.reserve(running_.size() + std::min<std::size_t>(waiting_.size(), 8));  // grown once, not per item
  int budget = limits_.max_tokens_per_step;
  // 1. Decodes of running sequences: one token each, so streams keep flowing. A decode that
  //    needs a new block may preempt the lowest-ranked running sequence (possibly itself).
  const std::vector<seq_status*>& running = ordered(true);
  // Both lists hold their tiers in order, so online work is present when either starts with it.
  const bool online = limits_.batch_step_tokens > 0 &&
                      ((!running.empty() && running.front()->prio != priority::batch) ||
                       (!waiting_.empty() && waiting_.front()->prio != priority::batch));
  // The prompt tokens a batch sequence may add to the step now, and a prompt chunk's size.
  const auto batch_room = [&] { return online ? std::max(0, limits_.batch_step_tokens - plan.total_tokens()) : budget; };
  const auto chunk_of = [&](const seq_status& s, int left) {
    return std::min({budget, left, s.prio == priority::batch ? batch_room() : budget});
  };
  for (seq_status* s : running) {
    if (budget == 0) break;
    if (!s->running || s->computed < s->prompt_len || s->computed + 1 != static_cast<int>(s->tokens.size())) continue;
    const int need = blocks_for(s->computed + 1) - static_cast<int>(s->blocks.size());
    if (need > 0) {
      if (!make_room(need, s, priority::interactive, plan, budget)) continue;
      pool_.allocate_into(need, s->blocks);
    }
    plan.items.push_back({s->id, 1, s->computed, false, true, -1, s});
    ++plan.decode_tokens;
    --budget;
  }
  // 2. Prompt (or recompute) chunks of running sequences; their blocks came with admission.
  //    (The same order: a sequence preempted in 1. is no longer running and is skipped.)
  for (seq_status* s : running) {
    if (budget == 0) break;
    const int left = static_cast<int>(s->tokens.size()) - s->computed;
    if (!s->running || (s->computed >= s->prompt_len && left <= 1)) continue;
    const int chunk = chunk_of(*s, left);
    if (chunk == 0) continue;
    plan.items.push_back({s->id, chunk, s->computed, true, chunk == left, -1, s});
    plan.prefill_tokens += chunk;
    budget -= chunk;
  }
  // 3. Admission in tier order; a sequence that does not fit stops lower ones from passing it.
  for (seq_status* s : ordered(false)) {
    if (blocks_for(static_cast<int>(s->tokens.size())) > pool_.capacity()) {
      // Grown (through preemption) past the whole pool: it can never run again.
      if (std::find(overflowed_.begin(), overflowed_.end(), s->id) == overflowed_.end()) overflowed_.push_back(s->id);
      continue;
    }
    if (budget == 0 || (s->prio == priority::batch && batch_room() == 0)) break;
    if (static_cast<int>(running_.size()) >= limits_.max_running) {
      if (s->prio != priority::interactive) break;
      // A full batch admits an interactive sequence in place of running batch work: the
      // latest admitted batch sequence.
      seq_status* victim = nullptr;
      for (auto it = running_.rbegin(); it != running_.rend() && !victim; ++it)
        if (!(*it)->guarded && (*it)->prio == priority::batch) victim = *it;
      if (!victim) break;
      preempt(*victim, plan, budget);
    }
    if (!admit(*s, plan, budget)) break;
    const int left = static_cast<int>(s->tokens.size()) - s->computed;
    const int chunk = chunk_of(*s, left);
    plan.items.push_back({s->id, chunk, s->computed, true, chunk == left, -1, s});
    plan.prefill_tokens += chunk;
    budget -= chunk;
  }
  planned_ = !plan.empty();
  return plan;
}

block_hash scheduler::block_key(const seq_status& s, std::size_t j, block_hash parent) const {
  const auto bs = static_cast<std::size_t>(pool_.block_size());
  return chain_hash_seeded(parent, s.key_seed, std::span(s.tokens).subspan(j * bs, bs));
}

std::size_t scheduler::key_full_blocks(seq_status& s) {
  const auto bs = static_cast<std::size_t>(pool_.block_size());
  const std::size_t first = s.keys.size();
  while ((s.keys.size() + 1) * bs <= static_cast<std::size_t>(s.computed))
    s.keys.push_back(block_key(s, s.keys.size(), s.keys.empty() ? 0 : s.keys.back()));
  return first;
}

void scheduler::publish_full_blocks(seq_status& s) {
  const std::size_t first = key_full_blocks(s);
  const std::size_t n = s.keys.size() - first;
  if (n == 1) pool_.cache(s.blocks[first], s.keys[first]);
  else if (n > 1) pool_.cache_all(std::span(s.blocks).subspan(first, n), std::span(s.keys).subspan(first));
}

void scheduler::update(const step_plan& plan, std::span<const token_id> sampled) {
  std::size_t next = 0;
  for (const plan_item& item : plan.items) {
    if (item.samples && next >= sampled.size()) break;
    const token_id tok = item.samples ? sampled[next++] : 0;
    seq_status& s = *item.status;
    if (!s.running) continue;  // removed (or preempted) since the plan was made
    s.computed = std::min(static_cast<int>(s.tokens.size()), s.computed + item.tokens);
    publish_full_blocks(s);
    if (item.samples) {
      s.tokens.push_back(tok);
      ++s.generated;
      --in_flight_;
      if (s.generated > s.progress_mark) s.guarded = false;
    }
  }
  planned_ = false;
  retired_.clear();
}

}  // namespace kiln::engine
