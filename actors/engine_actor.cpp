#include "actors/engine_actor.hpp"

#include <cstdio>

#include <caf/all.hpp>
#include <xxhash.h>

#include "engine/cpu_executor.hpp"
#if KILN_HAVE_CUDA
#include "engine/cuda_executor.hpp"
#endif
#include "engine/sim_executor.hpp"

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
      exec = std::make_unique<engine::cpu_executor>(rt.weights, kv, pool.threads);
      break;
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

engine::engine_request engine_state::to_request(const chat_job& j) const {
  engine::engine_request r;
  r.id = j.id;
  r.prompt.assign(j.prompt.begin(), j.prompt.end());
  r.sampling.max_tokens = j.max_tokens > 0 ? j.max_tokens : default_max_tokens;
  r.sampling.temperature = j.temperature;
  r.sampling.top_k = j.top_k;
  r.sampling.top_p = j.top_p;
  if (j.has_seed) r.sampling.seed = j.seed;
  r.sampling.stop = j.stop;
  r.prio = static_cast<engine::priority>(std::min<std::uint8_t>(j.priority, 2));
  r.cache_salt = XXH3_64bits(j.team.data(), j.team.size());  // the team, never the client
  return r;
}

int engine_state::cancel_sink(const caf::actor_addr& sink) {
  int n = 0;
  for (auto it = jobs.begin(); it != jobs.end();) {
    if (it->second.sink.address() == sink) {
      core->cancel(it->first);
      it = jobs.erase(it);
      ++n;
    } else {
      ++it;
    }
  }
  watched.erase(sink);
  return n;
}

void engine_state::publish() const {
  if (!gauges) return;
  const auto& pool = core->sched().pool();
  const engine::executor_load load = core->exec().load();
  gauges->set({who.replica_id, who.model, who.version, core->running(), core->waiting(), core->tokens_in_flight(), steps,
               core->preemptions(), pool.num_free(), pool.capacity(), load_seconds + load.seconds, load.bytes});
}

namespace {

using stateful = caf::stateful_actor<engine_state>;

// The executor failed (a device error): every job gets a terminal error, and the engine
// answers later jobs with 503 from now on.
void fail_all(stateful* self, const std::string& why) {
  auto& st = self->state;
  std::fprintf(stderr, "kiln: engine %s failed: %s\n", st.who.replica_id.c_str(), why.c_str());
  for (auto& [id, job] : st.jobs) {
    st.core->cancel(id);
    self->send(job.sink, stream_error{id, 500, "server_error", "The engine failed: " + why, "", "engine_failed", job.team});
  }
  st.jobs.clear();
  st.failure = why;
  st.pending = {};
  st.stepping = false;
}

void start_step(stateful* self) {
  auto& st = self->state;
  if (st.core->exec().modelled_time()) {
    // sim: the step is computed now; its modelled time passes on the actor clock.
    st.pending = st.core->step();
    if (!st.pending.error.empty()) return fail_all(self, st.pending.error);
    st.stepping = !st.pending.outputs.empty() || st.pending.batch_size > 0;
    if (!st.stepping) return;
    ++st.steps;
    const auto delay = std::chrono::duration_cast<caf::timespan>(std::chrono::duration<double>(st.pending.seconds));
    self->delayed_send(self, delay, step_atom::value);
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

// The step's time has passed: its tokens reach their sinks, then the next step starts.
void finish_step(stateful* self) {
  auto& st = self->state;
  if (st.core->in_flight()) {
    st.pending = st.core->end_step();
    if (!st.pending.error.empty()) return fail_all(self, st.pending.error);
  }
  const auto now = self->clock().now();
  for (auto& out : st.pending.outputs) {
    auto it = st.jobs.find(out.id);
    if (it == st.jobs.end()) continue;  // cancelled while the step ran
    auto& j = it->second;
    if (j.ttft_ms < 0)
      j.ttft_ms = std::chrono::duration<double, std::milli>(now - j.arrival).count();
    if (out.finish == engine::finish_reason::none) {
      if (!out.text.empty())
        self->send(j.sink, stream_tokens{out.id, std::move(out.text), out.new_tokens});
      continue;
    }
    stream_end end;
    end.id = out.id;
    end.text = std::move(out.text);
    end.tokens = out.new_tokens;
    end.finish_reason = std::string(engine::to_string(out.finish));
    end.prompt_tokens = out.usage.prompt_tokens;
    end.completion_tokens = out.usage.completion_tokens;
    end.cached_tokens = out.usage.cached_tokens;
    end.team = j.team;
    end.model_version = st.who.version;
    end.region = st.who.region;
    end.replica_id = st.who.replica_id;
    end.engine_ttft_ms = j.ttft_ms;
    self->send(j.sink, std::move(end));
    st.jobs.erase(it);
  }
  st.pending = {};
  st.stepping = false;
  if (!st.core->idle()) start_step(self);
  st.publish();
}

}  // namespace

caf::behavior engine_actor(stateful* self, engine_identity who, std::shared_ptr<const pool_runtime> pool,
                           std::shared_ptr<engine_gauges> gauges) {
  auto& st = self->state;
  st.who = std::move(who);
  st.default_max_tokens = pool->cfg->default_max_tokens;
  st.gauges = std::move(gauges);
  auto made = make_engine_core(*pool, XXH3_64bits(st.who.replica_id.data(), st.who.replica_id.size()));
  if (auto* e = std::get_if<std::string>(&made)) {
    st.failure = *e;
    std::fprintf(stderr, "kiln: engine %s cannot start: %s\n", st.who.replica_id.c_str(), e->c_str());
    return {[self](chat_job& job) {
              self->send(job.sink, stream_error{job.id, 503, "server_error",
                                                "The engine of " + self->state.who.replica_id + " cannot run: " +
                                                    self->state.failure,
                                                "", "engine_unavailable", job.team});
            },
            [](stats_atom) { return caf::make_message(std::int32_t{0}, std::int32_t{0}, std::int64_t{0}); }};
  }
  st.core = std::move(std::get<std::unique_ptr<engine::engine_core>>(made));
  st.load_seconds = pool->load_seconds;
  st.publish();
  self->set_down_handler([self](caf::down_msg& dm) {
    if (self->state.cancel_sink(dm.source) > 0) self->state.publish();
  });
  return {
      [self](chat_job& job) {
        auto& st = self->state;
        if (!st.failure.empty()) {
          self->send(job.sink, stream_error{job.id, 503, "server_error", "The engine failed: " + st.failure, "",
                                            "engine_unavailable", job.team});
          return;
        }
        if (!st.core->add(st.to_request(job))) {
          self->send(job.sink, stream_error{job.id, 400, "invalid_request_error",
                                            "The prompt (" + std::to_string(job.prompt.size()) +
                                                " tokens) does not fit in this replica's KV cache.",
                                            "messages", "context_length_exceeded", job.team});
          return;
        }
        if (job.sink && st.watched.insert(job.sink.address()).second) self->monitor(job.sink);
        st.jobs[job.id] = {job.sink, job.team, self->clock().now(), -1};
        if (!st.stepping) start_step(self);
        st.publish();
      },
      [self](step_atom) { finish_step(self); },
      [self](stats_atom) {
        const auto& c = *self->state.core;
        return caf::make_message(static_cast<std::int32_t>(c.waiting()),
                                 static_cast<std::int32_t>(c.running()), c.tokens_in_flight());
      },
  };
}

}  // namespace kiln::actors
