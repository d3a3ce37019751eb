#include "engine/engine_core.hpp"

#include <algorithm>
#include <limits>

// Inlined here: the block keys and prompt hashes are hot, of short or known lengths.
#ifndef XXH_INLINE_ALL
#define XXH_INLINE_ALL
#endif
#include <xxhash.h>

#include "engine/sim_executor.hpp"
#include "kernels/reference/sampling.hpp"

namespace kiln::engine {

using kernels::reference::mix64;

namespace {

/// The scheduler's copy of a prompt, with room for the answer's tokens (up to a bound), so
/// decoding does not move the whole sequence when it first grows.
std::vector<token_id> with_room(const token_list& prompt, int max_tokens) {
  std::vector<token_id> v;
  v.reserve(prompt.size() + static_cast<std::size_t>(std::clamp(max_tokens, 0, 4096)));
  prompt.copy_to(v);  // a prompt made on demand is made here, once
  return v;
}

}  // namespace

engine_core::engine_core(scheduler_limits limits, kv_geometry kv, std::unique_ptr<executor> exec,
                         std::shared_ptr<const tokenizer> tok, std::uint64_t salt)
    : sched_(limits, kv.num_blocks, kv.block_size),
      exec_(std::move(exec)),
      sim_(dynamic_cast<const sim_executor*>(exec_.get())),
      tok_(std::move(tok)),
      salt_(salt),
      stops_(tok_->stop_ids()),
      eos_(stops_.empty() ? tok_->eos() : stops_.front()) {}

int engine_core::coast_end(const sequence& s) const {
  if (!sim_ || !s.req.sampling.stop.empty() || !s.req.sampling.stop_token_ids.empty() || s.req.sampling.logprobs >= 0)
    return 0;
  return std::min(s.req.sampling.max_tokens,
                  std::max(sim_->natural_length(s.answer_seed), s.req.sampling.answer_min()) + 1);
}

bool engine_core::add(engine_request req) {
  // Prompt log-probabilities need every prompt row computed: no prefix-cache reuse.
  if (req.sampling.prompt_logprobs) req.cache_salt = mix64(req.cache_salt ^ mix64(req.id ^ 0x70726f6d7074ULL));
  std::uint64_t prompt_hash = 0;
  if (in_flight_) {
    // The worker reads the scheduler now: the sequence joins it when the step ends.
    if (!sched_.can_ever_fit(static_cast<int>(req.prompt.size()))) return false;
    deferred_adds_.push_back(req);
    prompt_hash = XXH3_64bits(req.prompt.data(), req.prompt.size() * sizeof(token_id));
  } else {
    // The scheduler's copy is the one read: a prompt made on demand is never made twice.
    auto tokens = with_room(req.prompt, req.sampling.max_tokens);
    prompt_hash = XXH3_64bits(tokens.data(), tokens.size() * sizeof(token_id));
    if (!sched_.add(req.id, req.prio, std::move(tokens), req.sampling.max_tokens, req.cache_salt)) return false;
  }
  sequence s;
  if (req.sampling.temperature <= 0)
    s.rng_seed = prompt_hash;  // greedy: the same prompt gives the same answer
  else if (req.sampling.seed)
    s.rng_seed = mix64(*req.sampling.seed) ^ prompt_hash;
  else
    s.rng_seed = mix64(salt_ ^ mix64(++unseeded_)) ^ prompt_hash;
  s.answer_seed = req.sampling.seed ? mix64(*req.sampling.seed) ^ prompt_hash : prompt_hash;
  s.req = std::move(req);
  if (s.req.sampling.adjusts_logits()) s.tally = std::make_unique<token_tally>();
  const seq_id id = s.req.id;
  sequence& kept = seqs_[id] = std::move(s);
  if (!in_flight_) sched_.set_user(id, &kept, coast_end(kept));
  return true;
}

bool engine_core::cancel(seq_id id) {
  if (in_flight_) {
    deferred_removes_.push_back(id);
    sched_.set_user(id, nullptr);  // its record goes now; the worker never reads this field
  } else {
    sched_.remove(id);
  }
  return seqs_.erase(id) > 0;
}

void engine_core::apply_deferred() {
  for (seq_id id : std::exchange(deferred_removes_, {})) sched_.remove(id);
  for (auto& r : std::exchange(deferred_adds_, {}))
    if (auto it = seqs_.find(r.id); it != seqs_.end()) {
      sched_.add(r.id, r.prio, with_room(r.prompt, r.sampling.max_tokens), r.sampling.max_tokens, r.cache_salt);
      sched_.set_user(r.id, &it->second, coast_end(it->second));
    }
}

const engine_core::sequence* engine_core::record_of(const seq_status& st) const {
  if (st.user) return static_cast<const sequence*>(st.user);
  const auto it = seqs_.find(st.id);
  return it == seqs_.end() ? nullptr : &it->second;
}

std::size_t safe_emit_end(const std::string& text, std::size_t from,
                          const std::vector<std::string>& stop, std::size_t& hit) {
  hit = std::string::npos;
  std::size_t end = text.size();
  for (std::size_t i = 0; i < stop.size(); ++i) {
    const std::string& s = stop[i];
    if (s.empty()) continue;
    const std::size_t start = from >= s.size() ? from - (s.size() - 1) : 0;
    if (auto pos = text.find(s, start); pos != std::string::npos && pos < end) {
      end = pos;
      hit = i;
    }
  }
  if (hit != std::string::npos) return end;
  // Hold back a UTF-8 character whose last bytes have not arrived yet.
  for (std::size_t back = 1; back <= 3 && back <= end - std::min(end, from); ++back) {
    const auto c = static_cast<unsigned char>(text[end - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte: look further back
    const std::size_t want = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    if (want > back) end -= back;
    break;
  }
  // Hold back the longest tail that could still grow into a stop string.
  for (const std::string& s : stop) {
    for (std::size_t len = std::min(s.size() - (s.empty() ? 0 : 1), text.size() - from); len > 0; --len) {
      if (text.compare(text.size() - len, len, s, 0, len) == 0) {
        end = std::min(end, text.size() - len);
        break;
      }
    }
  }
  return end;
}

token_logprob engine_core::named(const logprob_row& row) const {
  token_logprob t{tok_->decode(row.token), row.logprob, {}};
  for (const auto& [id, lp] : row.top) t.top.push_back({tok_->decode(id), lp});
  return t;
}

void engine_core::keep_prompt_logprobs(const prompt_logprobs_part& part) {
  auto it = seqs_.find(part.id);
  if (it == seqs_.end()) return;
  sequence& s = it->second;
  if (s.prompt_lp_sent) return;  // a recompute after preemption: sent already
  s.prompt_lp.resize(s.req.prompt.size());
  for (std::size_t i = 0; i < part.rows.size(); ++i) {
    const auto at = static_cast<std::size_t>(part.first_position) + i;
    if (at >= s.prompt_lp.size() || at == 0) continue;
    s.prompt_lp[at] = part.rows[i];
  }
}

void engine_core::attach_prompt_logprobs(sequence& s, seq_output& out) {
  if (!s.req.sampling.prompt_logprobs || s.prompt_lp_sent) return;
  s.prompt_lp_sent = true;
  s.prompt_lp.resize(s.req.prompt.size());
  out.prompt_logprobs.reserve(s.prompt_lp.size());
  for (std::size_t i = 0; i < s.prompt_lp.size(); ++i) {
    token_logprob t = named(s.prompt_lp[i]);
    t.token = tok_->decode(s.req.prompt[i]);
    if (i == 0) t.logprob = std::numeric_limits<float>::quiet_NaN();  // nothing before it to predict it
    out.prompt_logprobs.push_back(std::move(t));
  }
  s.prompt_lp = {};
}

seq_output engine_core::advance(sequence& s, token_id tok, const logprob_row* lp) {
  seq_output out;
  out.id = s.req.id;
  out.new_tokens = 1;
  ++s.generated;
  attach_prompt_logprobs(s, out);
  const auto& ids = s.req.sampling.stop_token_ids;
  const bool stop_id = !ids.empty() && std::binary_search(ids.begin(), ids.end(), tok);
  const bool eos = stop_id || ends_answer(tok);  // with ignore_eos: a token that counts, with no text
  if (lp && !eos) out.logprobs.push_back(named(*lp));
  if (stop_id || (eos && !s.req.sampling.ignore_eos)) {
    out.finish = finish_reason::stop;
  } else if (!text_ && s.req.sampling.stop.empty()) {
    if (s.generated >= s.req.sampling.max_tokens) out.finish = finish_reason::length;
    out.usage = usage_of(s);
    return out;
  } else if (!eos) {
    s.text += tok_->decode(tok);
  }
  std::size_t hit = std::string::npos;
  std::size_t end = safe_emit_end(s.text, s.emitted, s.req.sampling.stop, hit);
  if (hit != std::string::npos) {
    out.finish = finish_reason::stop;
  } else if (out.finish == finish_reason::none && s.generated >= s.req.sampling.max_tokens) {
    out.finish = finish_reason::length;
  }
  if (out.finish != finish_reason::none && hit == std::string::npos) end = s.text.size();
  if (end > s.emitted) {
    out.text = s.text.substr(s.emitted, end - s.emitted);
    s.emitted = end;
  }
  forget_emitted(s);
  out.usage = usage_of(s);
  return out;
}

// The text already returned is needed only where a stop string could still begin in it (its
// longest less one byte); the rest is dropped, so a long answer's text stays a few bytes that
// the next token's step finds in the caches, not a growing string copied as it grows.
void engine_core::forget_emitted(sequence& s) {
  std::size_t keep = 0;
  for (const std::string& stop : s.req.sampling.stop) keep = std::max(keep, stop.empty() ? 0 : stop.size() - 1);
  if (s.emitted <= keep) return;
  const std::size_t drop = s.emitted - keep;
  s.text.erase(0, drop);
  s.emitted -= drop;
}

usage engine_core::usage_of(const sequence& s) const {
  usage u;
  u.prompt_tokens = static_cast<int>(s.req.prompt.size());
  u.completion_tokens = s.generated;
  if (s.cached_tokens >= 0) {
    u.cached_tokens = s.cached_tokens;
  } else if (const seq_status* st = sched_.find(s.req.id)) {
    u.cached_tokens = st->cached_tokens;
    if (st->admitted_once) s.cached_tokens = st->cached_tokens;  // fixed from then on
  }
  return u;
}

seq_output engine_core::cut_short(sequence& s) {
  seq_output out;
  out.id = s.req.id;
  out.finish = finish_reason::length;
  out.text = s.text.substr(s.emitted);
  s.emitted = s.text.size();
  out.usage = usage_of(s);
  return out;
}

bool engine_core::prepare(step_result& result) {
  plan_ = sched_.schedule();
  for (seq_id id : sched_.take_overflowed()) {
    if (auto it = seqs_.find(id); it != seqs_.end()) {
      result.outputs.push_back(cut_short(it->second));
      seqs_.erase(it);
    }
    sched_.remove(id);
  }
  slots_.clear();
  adjust_.clear();
  std::vector<std::pair<std::size_t, std::size_t>> ranges;  // slot, its first adjustment
  for (const plan_item& item : plan_.items) {
    if (!item.samples) continue;
    const sequence& s = *record_of(*item.status);
    if (s.tally) {
      ranges.emplace_back(slots_.size(), adjust_.size());
      const auto& toks = item.status->tokens;
      append_adjustments(s.req.sampling, *s.tally,
                         std::span(toks.data(), std::min(toks.size(), static_cast<std::size_t>(item.status->prompt_len))),
                         s.generated < s.req.sampling.min_tokens ? std::span<const token_id>(stops_) : std::span<const token_id>(),
                         adjust_);
    }
    slots_.push_back({item.id, s.rng_seed, s.generated, s.req.sampling.temperature, s.req.sampling.top_k,
                      s.req.sampling.top_p, s.answer_seed, s.req.sampling.logprobs, {}, s.req.sampling.answer_min()});
  }
  for (std::size_t k = 0; k < ranges.size(); ++k) {
    const std::size_t end = k + 1 < ranges.size() ? ranges[k + 1].second : adjust_.size();
    slots_[ranges[k].first].adjust = std::span(adjust_).subspan(ranges[k].second, end - ranges[k].second);
  }
  for (plan_item& item : plan_.items) {
    if (!item.prefill) continue;
    const auto it = seqs_.find(item.id);
    if (it != seqs_.end() && it->second.req.sampling.prompt_logprobs && !it->second.prompt_lp_sent)
      item.prompt_logprobs = std::max(0, it->second.req.sampling.logprobs);
  }
  return !plan_.empty();
}

void engine_core::apply(const step_execution& exec, step_result& result) {
  if (!exec.error.empty() || exec.tokens.size() != slots_.size()) {
    result.error = exec.error.empty() ? "the executor returned no tokens" : exec.error;
    return;
  }
  sched_.update(plan_, exec.tokens);
  for (const auto& part : exec.prompt_logprobs) keep_prompt_logprobs(part);
  result.seconds = exec.seconds;
  result.batch_size = static_cast<int>(plan_.items.size());
  const bool quiet = quiet_step();
  result.quiet_steps = quiet ? 1 : 0;
  if (!quiet) result.outputs.reserve(result.outputs.size() + slots_.size());
  std::size_t i = 0;  // slots_ are the plan's sampling items, in order
  for (const plan_item& item : plan_.items) {
    if (!item.samples) continue;
    const std::size_t slot = i++;
    // A sequence cancelled while the step ran has no record any more (cancel() clears it).
    auto* rec = static_cast<sequence*>(item.status->user);
    if (!rec) continue;
    const logprob_row* lp = slot < exec.logprobs.size() && slots_[slot].logprobs >= 0 ? &exec.logprobs[slot] : nullptr;
    if (rec->tally) rec->tally->add(exec.tokens[slot]);
    // One of the step's quiet tokens: a plain decode token past the first that ends nothing
    // and carries nothing (no log-probabilities, no stop strings to hold text back for).
    if (quiet && rec->generated > 0 && !lp && !ends_answer(exec.tokens[slot]) &&
        rec->generated + 1 < rec->req.sampling.max_tokens && rec->req.sampling.stop.empty() &&
        rec->req.sampling.stop_token_ids.empty() &&
        (!rec->req.sampling.prompt_logprobs || rec->prompt_lp_sent)) {
      ++rec->generated;  // what advance() would do, without the output
      continue;
    }
    seq_output out = advance(*rec, exec.tokens[slot], lp);
    if (out.finish != finish_reason::none) {
      sched_.remove(out.id);
      seqs_.erase(out.id);
    }
    result.outputs.push_back(std::move(out));
  }
}

bool engine_core::quiet_step() const {
  if (text_ || plan_.items.size() != static_cast<std::size_t>(sched_.running())) return false;
  for (const plan_item& item : plan_.items)
    if (!item.samples && item.status->generated > 0) return false;  // recomputing after a preemption
  for (const seq_status* w : sched_.waiting_view())
    if (w->generated > 0) return false;  // preempted: waits to be recomputed
  return true;
}

std::vector<double> engine_core::coast_times(int max_steps) const {
  std::vector<double> times;
  coast_times(max_steps, times);
  return times;
}

void engine_core::coast_times(int max_steps, std::vector<double>& times) const {
  times.clear();
  if (!sim_ || in_flight_ || max_steps < 2) return;
  // Steps until the first sequence ends, by its length limit or its answer's eos (its
  // coast_end, kept with the scheduler's record so that this reads nothing else).
  const auto span = sched_.next_coast(max_steps);
  const int steps = span.steps;
  const std::int64_t kv = span.kv_tokens;
  if (steps < 2 || sched_.blocks_for_decode(steps) > sched_.pool().num_free()) return;
  // The shapes sim_executor::run() sees for those steps: the batch, reading one more token each.
  sim_->model().decode_totals(static_cast<std::int64_t>(sched_.running()), kv, steps, times);
}

step_result engine_core::coast(int steps) { return coast_split(steps, 0, nullptr); }

std::pair<step_result, step_result> engine_core::coast_and_one(int steps) {
  std::pair<step_result, step_result> r;
  r.second = coast_split(steps, 1, &r.first);
  return r;
}

step_result engine_core::coast_split(int first, int last, step_result* head) {
  step_result result;
  const int steps = first + last;
  if (!sim_ || steps <= 0) return result;
  // The batch in serving order (bulk_decode's order too); neither side's entries move or
  // go until the loop below removes the finished ones.
  const auto view = sched_.running_view();
  auto& [order, batch] = coast_;  // kept between coasts: no allocation per coast
  order.assign(view.begin(), view.end());
  batch.clear();
  for (const seq_status* st : order) {
    const sequence* rec = record_of(*st);
    if (!rec) return result;  // coast_times() checked every one: not reached
    __builtin_prefetch(&rec->answer_seed);  // what the tokens below are made from
    batch.push_back(const_cast<sequence*>(rec));
  }
  sched_.bulk_decode(steps, [&](std::size_t i, int from, std::span<token_id> out) {
    sim_->tokens_at(batch[i]->answer_seed, from, out, batch[i]->req.sampling.answer_min());
  });
  result.batch_size = static_cast<int>(batch.size());
  result.quiet_steps = head ? last : steps;
  if (head) {  // none of the head's steps ends a sequence: no outputs
    head->batch_size = result.batch_size;
    head->quiet_steps = first;
  }
  for (std::size_t i = 0; i < batch.size(); ++i) {
    sequence& s = *batch[i];
    const seq_status* st = order[i];
    s.generated += steps;
    finish_reason finish = finish_reason::none;
    if (!st->tokens.empty() && ends_answer(st->tokens.back())) finish = finish_reason::stop;
    else if (s.generated >= s.req.sampling.max_tokens) finish = finish_reason::length;
    if (finish == finish_reason::none) continue;
    seq_output out;
    out.id = st->id;
    out.new_tokens = head ? last : steps;
    out.finish = finish;
    out.text = s.text.substr(s.emitted);  // what the text held back goes with the end
    s.emitted = s.text.size();
    out.usage = usage_of(s);
    sched_.remove(out.id);
    seqs_.erase(out.id);
    result.outputs.push_back(std::move(out));
  }
  return result;
}

step_result engine_core::step() {
  step_result result;
  if (prepare(result)) apply(exec_->run(plan_, sched_, slots_), result);
  return result;
}

std::optional<step_result> engine_core::begin_step(std::function<void()> done) {
  step_result result;
  if (!prepare(result)) return result;
  pending_ = std::move(result);
  in_flight_ = true;
  if (!worker_) worker_ = std::make_unique<step_worker>();
  worker_->post([this, done = std::move(done)] {
    exec_result_ = exec_->run(plan_, sched_, slots_);
    done();
  });
  return std::nullopt;
}

step_result engine_core::end_step() {
  step_result result = std::move(pending_);
  pending_ = {};
  if (!in_flight_) return result;
  worker_->wait();
  in_flight_ = false;
  apply(exec_result_, result);
  exec_result_ = {};
  apply_deferred();
  return result;
}

}  // namespace kiln::engine
