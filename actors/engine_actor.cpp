#include "actors/engine_actor.hpp"

#include <algorithm>
#include <cstdio>

#include <caf/all.hpp>
#include <xxhash.h>

#include "actors/chaos.hpp"
#include "actors/engine_parts.hpp"
#include "actors/one_way.hpp"
#include "actors/wake_ticket.hpp"
#include "engine/cpu_executor.hpp"
#if KILN_HAVE_CUDA
#include "engine/cuda_executor.hpp"
#endif
#include "engine/sim_executor.hpp"

namespace kiln::actors::detail {
/// A core the loader built (or why not), handed to the engine actor that asked for it.
struct made_core {
  std::shared_ptr<std::variant<std::unique_ptr<engine::engine_core>, std::string>> made;
};
}  // namespace kiln::actors::detail

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kiln::actors::detail::made_core)

namespace kiln::actors {

std::variant<std::unique_ptr<engine::engine_core>, std::string> make_engine_core(const pool_runtime& rt,
                                                                                 std::uint64_t salt) {
  const config::pool_config& pool = *rt.cfg;
  engine::kv_geometry kv{pool.engine_kv_blocks(), pool.block_size};
  std::unique_ptr<engine::executor> exec;
  switch (pool.executor) {
    case config::executor_kind::sim:
      exec = std::make_unique<engine::sim_executor>(engine::cost_model(pool.shape, pool.gpu), pool.text,
                                                    rt.tokenizer->vocab_size(), rt.tokenizer->eos());
      break;
    case config::executor_kind::cpu:
      exec = std::make_unique<engine::cpu_executor>(rt.cpu, kv, pool.threads, rt.cpu_kv);
      break;
    case config::executor_kind::remote: return std::string("a remote pool's replicas run no engine here");
    case config::executor_kind::cuda: {
#if KILN_HAVE_CUDA
      engine::cuda_options opts;
      opts.weights = pool.weights_dtype == "f32"    ? engine::cuda_weights::f32
                     : pool.weights_dtype == "int8" ? engine::cuda_weights::int8
                                                    : engine::cuda_weights::bf16;
      opts.memory_fraction = pool.gpu_memory_fraction;
      opts.kv_blocks = pool.kv_blocks;
      opts.block_size = pool.block_size;
      opts.max_step_tokens = pool.limits.max_tokens_per_step;
      opts.max_batch = pool.limits.max_running;
      opts.max_context = pool.max_context;
      auto made = engine::cuda_executor::create(rt.weights, opts);
      if (auto* e = std::get_if<std::string>(&made)) return *e;
      auto cuda = std::move(std::get<std::unique_ptr<engine::cuda_executor>>(made));
      kv = cuda->kv();
      exec = std::move(cuda);
      break;
#else
      return std::string("kiln was built without CUDA (no nvcc)");
#endif
    }
  }
  return std::make_unique<engine::engine_core>(pool.limits, kv, std::move(exec), rt.tokenizer, salt);
}

engine::engine_request engine_state::to_engine_request(const request& r, engine::seq_id seq) const {
  engine::engine_request e;
  e.id = seq;
  e.prompt = r.prompt;
  e.sampling = r.sampling;
  if (e.sampling.max_tokens <= 0) e.sampling.max_tokens = default_max_tokens;
  e.prio = r.priority;
  e.cache_salt = XXH3_64bits(r.team.data(), r.team.size());  // the team, never the client
  return e;
}

void engine_state::take_quiet(job& j, std::uint64_t before, std::uint64_t after) {
  if (j.ttft_ms >= 0) j.unsent += static_cast<std::int32_t>(before - j.quiet_base);
  j.quiet_base = after;
}

engine::usage engine_state::usage_of(const job& j) const {
  engine::usage u = j.usage;
  if (j.ttft_ms >= 0) u.completion_tokens += static_cast<int>(quiet_steps - j.quiet_base);
  return u;
}

void engine_state::flush(job& j) {
  take_quiet(j, quiet_steps, quiet_steps);
  if (j.unsent == 0 && j.unsent_text.empty()) return;
  caf::anon_send(j.sink, stream_tokens{j.id, std::move(j.unsent_text), j.unsent, -1, -1, {}, {}});
  j.unsent = 0;
  j.unsent_text.clear();
}

std::size_t engine_state::coast_steps_ended(caf::timespan elapsed) const {
  return static_cast<std::size_t>(std::upper_bound(coast_ends.begin(), coast_ends.end(), elapsed) - coast_ends.begin());
}

engine_state::~engine_state() {
  if (coasting && core && clock) {
    const std::size_t done = coast_steps_ended(clock->now() - coast_from);
    if (done > 0) {
      const engine::step_result ended = core->coast(static_cast<int>(done));
      const std::uint64_t before = quiet_steps;
      quiet_steps += static_cast<std::uint64_t>(ended.quiet_steps);
      for (const auto& out : ended.outputs)
        if (job* j = jobs.find(out.id)) {
          take_quiet(*j, before, quiet_steps);
          j->unsent += out.new_tokens;
        }
    }
  }
  for (const engine::seq_id seq : jobs.sorted_keys()) flush(*jobs.find(seq));
}


engine_load engine_state::load(int ahead) const {
  engine_load l = totals;
  if (core) {
    l.waiting = core->waiting();
    l.running = core->running();
    l.tokens_in_flight = ahead > 0 ? core->coast_ahead(ahead).tokens_in_flight : core->tokens_in_flight();
  }
  return l;
}

int engine_state::coast_steps_begun(caf::actor_clock::time_point now) const {
  if (!coasting) return 0;
  const std::size_t begun = coast_steps_ended(now - coast_from) + 1;
  return begun < coast_ends.size() ? static_cast<int>(begun) : 0;
}

void engine_state::publish(int ahead) const {
  if (!gauges || !core) return;
  const auto& pool = core->sched().pool();
  const engine::executor_load exec = core->exec().load();
  const engine::engine_core::coast_view now = ahead > 0 ? core->coast_ahead(ahead)
                                                        : engine::engine_core::coast_view{core->tokens_in_flight(), pool.num_free()};
  gauges->update_engine(who.replica_id, [&](engine_gauge& g) {
    if (g.replica_id != who.replica_id) g.replica_id = who.replica_id;
    if (g.model != who.model) g.model = who.model;
    if (g.version != who.version) g.version = who.version;
    g.running = core->running();
    g.waiting = core->waiting();
    g.tokens_in_flight = now.tokens_in_flight;
    g.steps = steps + static_cast<std::uint64_t>(ahead);
    g.preemptions = core->preemptions();
    g.kv_blocks_free = now.kv_blocks_free;
    g.kv_blocks_total = pool.capacity();
    g.load_seconds = load_seconds + exec.seconds;
    g.weight_bytes = exec.bytes;
    g.prompt_tokens_total = totals.prompt_tokens_total;
    g.cached_tokens_total = totals.cached_tokens_total;
  }, &gauge_row);
}

namespace {

using stateful = caf::stateful_actor<engine_state>;

bool owner_alive(const engine_state& st, const engine_state::job& j) { return engine_parts::owner_alive(st.gone_owners, j.owner); }

void watch(stateful* self, const caf::actor& a) { engine_parts::watch(self, self->state.watched, a); }

// A request the engine cannot take or finish: its owner decides (retry or error); with no
// owner left, the engine ends it at the sink.
void report_failure(stateful* self, const request_id& id, std::uint8_t attempt, const caf::actor& owner,
                    const caf::actor& sink, errc code, const std::string& msg, engine::usage used = {}) {
  const bool alive = owner && !self->state.gone_owners.count(owner.address());
  if (alive) self->send(owner, job_failed{id, attempt, code, msg, used});
  else if (sink) self->send(sink, stream_error{id, code, msg, "", 0});
}

// Whether a request is one of the drill's faulty ones: a fixed choice per request id.
bool injected_fault(const request_id& id, double fraction) {
  const std::uint64_t h = (id.origin ^ (id.seq * 0x9E3779B97F4A7C15ull)) * 0xBF58476D1CE4E5B9ull;
  return static_cast<double>(h >> 11) * 0x1.0p-53 < fraction;
}

void forget(engine_state& st, engine::seq_id seq) {
  const auto gone = st.jobs.take(seq);
  if (gone) st.by_request.erase(gone->id);
}

// The executor failed (a device error): every request gets a failure, and the actor ends
// abnormally so that its replica starts a fresh engine with fresh KV.
void fail_all(stateful* self, const std::string& why) {
  auto& st = self->state;
  std::fprintf(stderr, "kiln: engine %s failed: %s\n", st.who.replica_id.c_str(), why.c_str());
  for (const engine::seq_id seq : st.jobs.sorted_keys()) {
    engine_state::job& j = *st.jobs.find(seq);
    st.core->cancel(seq);
    const engine::usage used = st.usage_of(j);
    st.flush(j);
    report_failure(self, j.id, j.attempt, j.owner, j.sink, errc::engine_failed, "The engine failed: " + why, used);
  }
  st.jobs.clear();
  st.by_request.clear();
  self->quit(caf::make_error(caf::sec::runtime_error, "engine failed: " + why));
}

void start_step(stateful* self, bool may_coast = true);
caf::timespan seconds_span(double s);

// One message per sink for the step: a sink that serves many requests (a front's) gets a
// batch, a sink of one request its tokens as they are.
void send_batches(stateful* self, std::vector<std::pair<caf::actor, stream_batch>>& by_sink) {
  for (auto& [sink, batch] : by_sink) {
    if (batch.items.size() == 1) self->send(sink, std::move(batch.items.front()));
    else self->send(sink, std::move(batch));
  }
  by_sink.clear();
}

// `expected`: how many the step may still add (its outputs left), so a sink's batch grows once.
void add_tokens(std::vector<std::pair<caf::actor, stream_batch>>& by_sink, const caf::actor& sink, stream_tokens ev,
                std::size_t expected) {
  for (auto& [s, b] : by_sink)
    if (s == sink) {
      b.items.push_back(std::move(ev));
      return;
    }
  by_sink.emplace_back(sink, stream_batch{});
  by_sink.back().second.items.reserve(expected);
  by_sink.back().second.items.push_back(std::move(ev));
}

// A finished request's end: to its owner, or with none left, at its sink.
void send_finish(stateful* self, engine_state::job& j, const engine::seq_output& out) {
  auto& st = self->state;
  if (st.fault_fraction > 0 && injected_fault(j.id, st.fault_fraction)) {
    report_failure(self, j.id, j.attempt, j.owner, j.sink, errc::engine_failed,
                   "The engine of " + st.who.replica_id + " failed (an injected fault).", out.usage);
  } else if (owner_alive(st, j)) {
    self->send(j.owner, job_done{j.id, j.attempt, out.finish, out.usage, st.who.replica_id, std::max(0.0, j.ttft_ms)});
  } else {
    self->send(j.sink, engine_parts::end_at_sink(j.id, out.finish, out.usage, st.who, j.ttft_ms, j.attempt));
  }
}

// A step's outputs reach their sinks (tokens, one message per sink) and owners (first token
// before the tokens leave; ends after them, so an end never overtakes its last tokens).
void send_outputs(stateful* self) {
  auto& st = self->state;
  const auto now = self->clock().now();
  auto& by_sink = st.step_batches;  // emptied by send_batches
  std::vector<std::size_t> finished;  // indexes into pending.outputs
  const std::uint64_t quiet_before = st.quiet_steps;
  st.quiet_steps += static_cast<std::uint64_t>(st.pending.quiet_steps);
  for (std::size_t k = 0; k < st.pending.outputs.size(); ++k) {
    auto& out = st.pending.outputs[k];
    engine_state::job* found = st.jobs.find(out.id);
    if (!found) continue;  // cancelled while the step ran
    auto& j = *found;
    engine_state::take_quiet(j, quiet_before, st.quiet_steps);
    j.usage = out.usage;
    const bool first = j.ttft_ms < 0 && out.new_tokens > 0;
    if (first) {
      j.ttft_ms = std::chrono::duration<double, std::milli>(now - j.arrival).count();
      // Before the tokens leave: an owner that has not heard this knows none reached the client.
      if (owner_alive(st, j)) self->send(j.owner, first_token{j.id, j.attempt});
    }
    if (st.coast && !first && out.finish == engine::finish_reason::none && out.logprobs.empty()) {
      j.unsent += out.new_tokens;  // the rest of the stream goes at its end
      j.unsent_text += out.text;
    } else if (out.new_tokens > 0 || !out.text.empty() || j.unsent > 0) {
      std::string text = j.unsent_text.empty() ? std::move(out.text) : std::move(j.unsent_text) + out.text;
      add_tokens(by_sink, j.sink,
                 stream_tokens{j.id, std::move(text), j.unsent + out.new_tokens, first ? out.usage.prompt_tokens : -1,
                               first ? out.usage.cached_tokens : -1, std::move(out.logprobs),
                               std::move(out.prompt_logprobs)},
                 st.coast ? 0 : st.pending.outputs.size() - k);  // a coasting engine sends few
      j.unsent = 0;
      j.unsent_text.clear();
    }
    if (out.finish != engine::finish_reason::none) finished.push_back(k);
  }
  send_batches(self, by_sink);
  for (std::size_t k : finished) {
    const auto& out = st.pending.outputs[k];
    engine_state::job* j = st.jobs.find(out.id);
    if (!j) continue;
    st.totals.prompt_tokens_total += out.usage.prompt_tokens;
    st.totals.cached_tokens_total += out.usage.cached_tokens;
    send_finish(self, *j, out);
    forget(st, out.id);
  }
  st.pending = {};
}

// The step's time has passed: its tokens reach their sinks, then the next step starts.
void deliver(stateful* self, bool may_coast = true) {
  auto& st = self->state;
  send_outputs(self);
  st.stepping = false;
  if (!st.core->idle()) start_step(self, may_coast);
  st.publish();
}

constexpr int kMaxCoastSteps = 4096;

// Steady decode: the steps up to the next end of a sequence run as one timer.
bool begin_coast(stateful* self) {
  auto& st = self->state;
  if (!st.coast || st.slow_factor != 1) return false;
  std::vector<double>& times = st.coast_seconds;
  st.core->coast_times(kMaxCoastSteps, times);
  if (times.empty()) return false;
  st.coasting = true;
  st.stepping = true;
  st.coast_from = self->clock().now();
  st.coast_ends.clear();
  caf::timespan at{0};
  for (double s : times) {
    at += seconds_span(s);  // as each step's own timer would add up
    st.coast_ends.push_back(at);
  }
  self->delayed_send(self, at, coast_atom::value, wake_ticket{st.coast_epoch, ++*st.coast_epoch});
  return true;
}

// Brings a coasting engine to where step-by-step running would be now: the steps that have
// ended are applied and their tokens sent; the step under way becomes an ordinary step that
// ends when it would have. Every message but the coast's own wakeup settles first, so what it
// sees and changes (a new request, a cancel, a heartbeat) is exactly as without coasting.
void settle(stateful* self, bool wakeup = false) {
  auto& st = self->state;
  if (!st.coasting) return;
  st.coasting = false;
  ++*st.coast_epoch;
  const caf::timespan elapsed = self->clock().now() - st.coast_from;
  const std::size_t done = st.coast_steps_ended(elapsed);
  if (done == st.coast_ends.size()) {
    if (done > 0) {
      st.pending = st.core->coast(static_cast<int>(done));
      st.steps += done;
    }
    // At its own wakeup the next stretch may coast too; settled by a message arriving at that
    // very time, the next step is an ordinary one, so what the message adds joins after it.
    deliver(self, /*may_coast=*/wakeup);
    return;
  }
  // The steps that ended are sent now; the step under way is applied as it was planned
  // (before whatever this message adds) and ends when it would have. One pass for both.
  if (done > 0) {
    auto [ended, under_way] = st.core->coast_and_one(static_cast<int>(done));
    st.pending = std::move(ended);
    send_outputs(self);
    st.pending = std::move(under_way);
  } else {
    send_outputs(self);
    st.pending = st.core->coast(1);
  }
  st.steps += done + 1;
  self->delayed_send(self, st.coast_ends[done] - elapsed, step_atom::value);
}

caf::timespan seconds_span(double s) {
  return std::chrono::duration_cast<caf::timespan>(std::chrono::duration<double>(s));
}

void start_step(stateful* self, bool may_coast) {
  auto& st = self->state;
  if (may_coast && begin_coast(self)) return;
  if (st.core->exec().modelled_time()) {
    // sim: the step is computed now; its modelled time passes on the actor clock.
    st.pending = st.core->step();
    if (!st.pending.error.empty()) return fail_all(self, st.pending.error);
    st.stepping = !st.pending.outputs.empty() || st.pending.batch_size > 0;
    if (!st.stepping) return;
    ++st.steps;
    self->delayed_send(self, seconds_span(st.pending.seconds * st.slow_factor), step_atom::value);
    return;
  }
  // cpu, cuda: the step runs on the engine's worker; its end arrives as a message.
  auto done = [handle = caf::actor_cast<caf::actor>(self)] { caf::anon_send(handle, step_atom::value); };
  auto now = st.core->begin_step(std::move(done));
  st.stepping = true;
  if (!now) {
    ++st.steps;
    return;
  }
  st.pending = std::move(*now);  // nothing launched; deliver what ended
  if (st.pending.outputs.empty()) {
    st.stepping = false;
    return;
  }
  self->send(self, step_atom::value);
}

void on_step(stateful* self) {
  auto& st = self->state;
  if (st.core->in_flight()) {
    st.pending = st.core->end_step();
    if (!st.pending.error.empty()) return fail_all(self, st.pending.error);
    if (st.slow_factor > 1 && st.pending.seconds > 0) {
      // chaos slow: the step's tokens leave as late as a step this much slower would.
      self->delayed_send(self, seconds_span(st.pending.seconds * (st.slow_factor - 1)), step_atom::value);
      return;
    }
  }
  deliver(self);
}

void on_chaos(stateful* self, const chaos_order& o) {
  switch (o.action) {
    case chaos_action::freeze: freeze(self, o.seconds); break;
    case chaos_action::slow:
      self->state.slow_factor = std::max(1.0, o.factor);
      self->delayed_send(self, seconds_span(o.seconds), unslow_atom::value);
      break;
    case chaos_action::kill: self->quit(caf::exit_reason::kill); break;
    case chaos_action::fail: fail_all(self, "injected device failure (chaos)"); break;
  }
}

caf::behavior serving(stateful* self) {
  // Cases are tried in order: the step timers, most of an engine's messages, first.
  return {
      [self](step_atom) -> one_way {
        on_step(self);
        return handled;
      },
      [self](coast_atom, const wake_ticket& t) -> one_way {
        if (self->state.coasting && !t.void_now()) settle(self, /*wakeup=*/true);
        return handled;
      },
      [self](request& r) -> one_way {
        settle(self);
        auto& st = self->state;
        st.totals.received_tokens += request_tokens(r);
        const engine::seq_id seq = ++st.next_seq;
        if (!st.core->add(st.to_engine_request(r, seq))) {
          report_failure(self, r.id, r.attempt, r.owner, r.sink, errc::context_too_long,
                         "The prompt (" + std::to_string(r.prompt.size()) +
                             " tokens) does not fit in this replica's KV cache.");
          return handled;
        }
        const caf::actor client = r.client ? r.client : r.sink;
        watch(self, client);
        watch(self, r.owner);
        st.jobs[seq] = {r.id, r.sink, r.owner, client, r.attempt, self->clock().now(), -1, {}, 0, {}, 0};
        st.by_request[r.id] = seq;
        if (!st.stepping) start_step(self);
        st.publish();
        return handled;
      },
      [self](cancel_job& c) -> one_way {
        settle(self);
        auto& st = self->state;
        const engine::seq_id* found = st.by_request.find(c.id);
        if (!found) return handled;
        const engine::seq_id seq = *found;  // forget() erases the entry
        if (engine_state::job* j = st.jobs.find(seq)) st.flush(*j);
        st.core->cancel(seq);
        forget(st, seq);
        st.publish();
        return handled;
      },
      [self](stats_atom) {
        // A heartbeat reads the engine without settling its coast: the figures are those
        // step-by-step running would show now, and the coast runs on uncut (settling it
        // would end it here and plan a new one from the step under way).
        auto& st = self->state;
        if (const int ahead = st.coast_steps_begun(self->clock().now()); ahead > 0) {
          st.publish(ahead);
          return st.load(ahead);
        }
        settle(self);
        return st.load();
      },
      [self](chaos_order& o) {
        settle(self);
        on_chaos(self, o);
      },
      [self](unslow_atom) { self->state.slow_factor = 1; },
  };
}

caf::behavior loading(stateful* self, std::shared_ptr<const pool_runtime> pool, caf::actor parent) {
  return {
      [self, pool, parent](detail::made_core& m) {
        auto& st = self->state;
        if (auto* why = std::get_if<std::string>(m.made.get())) {
          std::fprintf(stderr, "kiln: engine %s cannot start: %s\n", st.who.replica_id.c_str(), why->c_str());
          self->send(parent, engine_unloadable{st.who.replica_id, *why});
          self->quit();
          return;
        }
        st.core = std::move(std::get<std::unique_ptr<engine::engine_core>>(*m.made));
        st.core->set_text(!st.coast);  // a coasting engine's client counts tokens
        st.load_seconds = pool->load_seconds;
        st.publish();
        self->send(parent, engine_ready{st.who.replica_id});
        self->become(serving(self));
      },
      [self](request& r) {
        self->state.totals.received_tokens += request_tokens(r);
        report_failure(self, r.id, r.attempt, r.owner, r.sink, errc::unavailable,
                       "Replica " + self->state.who.replica_id + " is still loading.");
      },
      [](cancel_job&) {},
      [self](stats_atom) { return self->state.load(); },
      [self](chaos_order& o) { on_chaos(self, o); },
      [self](unslow_atom) { self->state.slow_factor = 1; },
  };
}

}  // namespace

int engine_state::cancel_client(caf::event_based_actor* self, const caf::actor_addr& client) {
  int n = 0;
  for (const engine::seq_id seq : jobs.sorted_keys()) {
    const job& j = *jobs.find(seq);
    if (j.client.address() != client) continue;
    core->cancel(seq);
    if (j.owner && !gone_owners.count(j.owner.address())) {
      self->send(j.owner, job_done{j.id, j.attempt, engine::finish_reason::cancelled, usage_of(j), who.replica_id, 0});
    }
    by_request.erase(j.id);
    jobs.erase(seq);
    ++n;
  }
  return n;
}

caf::behavior engine_actor(stateful* self, engine_identity who, std::shared_ptr<const pool_runtime> pool,
                           std::shared_ptr<fleet_gauges> gauges, std::shared_ptr<loader> loader, caf::actor parent) {
  auto& st = self->state;
  st.who = std::move(who);
  st.default_max_tokens = pool->cfg->default_max_tokens;
  st.coast = pool->cfg->coast_steps && pool->cfg->executor == config::executor_kind::sim;
  if (pool->cfg->executor == config::executor_kind::sim) st.fault_fraction = pool->cfg->fault_fraction;
  st.clock = &self->clock();
  st.gauges = std::move(gauges);
  self->attach_functor([g = st.gauges, id = st.who.replica_id] {
    if (g) g->erase(id);
  });
  self->set_down_handler([self](caf::down_msg& dm) {
    auto& st = self->state;
    st.watched.erase(dm.source);
    st.jobs.for_each([&](engine::seq_id, const engine_state::job& j) {
      if (j.owner.address() == dm.source) st.gone_owners.insert(dm.source);  // its requests now end at their sinks
    });
    if (!st.core) return;
    settle(self);
    if (st.cancel_client(self, dm.source) > 0) st.publish();
  });
  const std::uint64_t salt = XXH3_64bits(st.who.replica_id.data(), st.who.replica_id.size());
  loader->run([handle = caf::actor_cast<caf::actor>(self), pool, salt] {
    auto made = std::make_shared<std::variant<std::unique_ptr<engine::engine_core>, std::string>>(
        make_engine_core(*pool, salt));
    caf::anon_send(handle, detail::made_core{std::move(made)});
  });
  return loading(self, std::move(pool), std::move(parent));
}

}  // namespace kiln::actors
