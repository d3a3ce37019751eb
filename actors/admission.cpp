#include "actors/admission.hpp"
#include "actors/region_limits.hpp"

#include <algorithm>

#include <caf/all.hpp>

#include "actors/meter.hpp"
#include "actors/one_way.hpp"
#include "actors/stream_sink.hpp"
#include "actors/tokenize_call.hpp"

namespace kiln::actors {

namespace {

stream_error refuse(const request& r, errc code, std::string message, std::string param = {}, std::int32_t retry_after_s = 0) {
  return stream_error{r.id, code, std::move(message), std::move(param), retry_after_s};
}

}  // namespace

static std::string routing_key(const request& r) {
  if (!r.conversation_id.empty()) return r.conversation_id;
  // A conversation's later turns repeat its opening: the first two messages (or tokens).
  std::string key = r.team + '\n';
  for (std::size_t i = 0; i < r.messages.size() && i < 2; ++i) key += r.messages[i].role + ':' + r.messages[i].content + '\n';
  if (r.messages.empty() && !r.prompt_text.empty()) key += r.prompt_text.substr(0, 256);
  if (r.messages.empty())
    key.append(reinterpret_cast<const char*>(r.prompt.data()), std::min<std::size_t>(r.prompt.size(), 64) * sizeof(std::int32_t));
  return key;
}

std::string admission_state::version_of(const std::string& model, const request& r) const {
  auto rt = routes.find(model);
  if (rt == routes.end()) return cfg->live_version(model);
  const config::model_route& route = rt->second.route;
  if (route.canary.empty() || route.canary_percent <= 0) return route.live;
  const std::string& v = version_for(route, routing_key(r));
  if (v != route.live) {
    auto it = pools.find(model + "@" + v);
    if (it == pools.end() || it->second.status != pool_status::serving || !it->second.router) return route.live;
  }
  return v;
}

std::variant<caf::actor, stream_error> admission_state::admit(request& r, caf::actor_clock::time_point now) const {
  auto [model, version] = config::split_model_ref(r.model);
  if (version.empty()) version = version_of(model, r);
  auto it = pools.find(model + "@" + version);
  if (!version.empty() && it == pools.end() && routes.contains(model) && r.model == model)
    return refuse(r, errc::unavailable, "The model '" + r.model + "' is loading.", "", 2);  // a routed version's pool starting
  if (version.empty() || it == pools.end())
    return refuse(r, errc::unknown_model, "The model '" + r.model + "' does not exist.", "model");
  const pool_update& pool = it->second;
  switch (pool.status) {
    case pool_status::serving:
      if (!pool.router) return refuse(r, errc::unavailable, "The model '" + r.model + "' is restarting.", "", 1);
      break;
    case pool_status::loading:
      return refuse(r, errc::unavailable, "The model '" + r.model + "' is loading.", "", 2);
    case pool_status::failed:
      return refuse(r, errc::unavailable, "The model '" + r.model + "' is unavailable: " + pool.failure, "", 60);
    case pool_status::degraded: {
      const auto wait = std::chrono::ceil<std::chrono::seconds>(pool.retry_at - now).count();
      return refuse(r, errc::degraded,
                    "The model '" + r.model + "' is degraded: its replicas failed too often; they start again shortly.",
                    "", static_cast<std::int32_t>(std::max<long long>(1, wait)));
    }
  }
  const pool_runtime& rt = *pool.runtime;
  const config::pool_config& cfg_pool = *rt.cfg;
  // A request that arrives as tokens (the simulator's, a replayed capture) skips the template.
  // A remote pool's upstream is sent the text itself: it travels on beside the tokens that
  // charge and route it.
  const bool keep_text = cfg_pool.executor == config::executor_kind::remote;
  // A token id the client sent that names no row of the model's embeddings and head.
  const auto past_vocab = [&](std::int32_t id, const char* param) {
    return refuse(r, errc::invalid_request,
                  "Token id " + std::to_string(id) + " in '" + param + "' is outside the model's vocabulary of " +
                      std::to_string(rt.vocab) + " tokens.",
                  param);
  };
  if (!r.prompt_text.empty()) {
    const auto ids = r.prompt_specials ? rt.tokenizer->encode_special(r.prompt_text) : rt.tokenizer->encode(r.prompt_text);
    r.prompt.assign(ids.begin(), ids.end());
    if (!keep_text) r.prompt_text.clear();
  } else if (!r.messages.empty() || r.prompt.empty()) {
    auto prompt = rt.prompt_for(r);
    if (auto* e = std::get_if<std::string>(&prompt))
      return refuse(r, errc::invalid_request, "The chat template rejected the messages: " + *e, "messages");
    r.prompt = std::move(std::get<std::vector<std::int32_t>>(prompt));
  } else if (rt.vocab > 0) {
    // Token ids as the client sent them: each names a row of the model's embeddings (a cpu
    // engine would read a wrong row, a GPU one past the table).
    const auto top = *std::max_element(r.prompt.begin(), r.prompt.end());
    if (top >= rt.vocab) return past_vocab(top, "prompt");
  }
  if (!keep_text) {
    r.messages.clear();  // rendered: the tokens travel on, not the text
    r.chat_json.clear();
  }
  r.model = model;
  r.version = version;
  if (r.sampling.max_tokens <= 0) r.sampling.max_tokens = cfg_pool.default_max_tokens;
  if (keep_text && (r.sampling.prompt_logprobs || r.sampling.logprobs >= 0))
    return refuse(r, errc::invalid_request, "Log-probabilities are not available from a remote pool's upstreams.",
                  "logprobs");
  if (!r.sampling.stop_token_ids.empty() && rt.vocab > 0 && r.sampling.stop_token_ids.back() >= rt.vocab)
    return past_vocab(r.sampling.stop_token_ids.back(), "stop_token_ids");
  if (!r.sampling.logit_bias.empty() && rt.vocab > 0 && r.sampling.logit_bias.back().first >= rt.vocab)
    return past_vocab(r.sampling.logit_bias.back().first, "logit_bias");
  if (r.sampling.min_tokens > r.sampling.max_tokens)
    return refuse(r, errc::invalid_request,
                  "'min_tokens' (" + std::to_string(r.sampling.min_tokens) + ") must be at most 'max_tokens' (" +
                      std::to_string(r.sampling.max_tokens) + ", this model's default).",
                  "min_tokens");
  if (r.sampling.adjusts_logits() && cfg_pool.executor == config::executor_kind::cuda)
    return refuse(r, errc::invalid_request,
                  "logit_bias, min_tokens and the presence, frequency and repetition penalties are not available on "
                  "the cuda executor yet.",
                  !r.sampling.logit_bias.empty() ? "logit_bias" : r.sampling.min_tokens > 0 ? "min_tokens" : "presence_penalty");
  if (r.sampling.prompt_logprobs && cfg_pool.executor == config::executor_kind::cuda)
    return refuse(r, errc::invalid_request,
                  "The prompt's log-probabilities (echo with logprobs) are not available on the cuda executor yet.", "echo");
  const auto total = static_cast<std::int64_t>(r.prompt.size()) + r.sampling.max_tokens;
  if (total > cfg_pool.max_context) {
    return refuse(r, errc::context_too_long,
                  "This model's maximum context length is " + std::to_string(cfg_pool.max_context) +
                      " tokens; the request asks for " + std::to_string(r.prompt.size()) + " prompt + " +
                      std::to_string(r.sampling.max_tokens) + " completion tokens.",
                  "messages");
  }
  return pool.router;
}

static std::int64_t capacity_of(const pool_update& u) {
  const config::pool_config& p = *u.runtime->cfg;
  const std::int64_t all = p.pool_capacity_tokens();
  if (u.serving_replicas < 0 || p.replicas <= 0) return all;
  return all / p.replicas * u.serving_replicas;  // an autoscaled pool: the replicas serving now
}

pool_gate& admission_state::gate(const std::string& key) {
  auto it = gates.find(key);
  if (it != gates.end()) return it->second;
  const pool_update& u = pools.at(key);
  const config::pool_config& p = *u.runtime->cfg;
  return gates.try_emplace(key, capacity_of(u), static_cast<std::size_t>(p.queue_limit),
                           std::chrono::milliseconds(p.first_token_timeout_ms))
      .first->second;
}

void admission_state::publish(const std::string& team, const std::string& model, const std::string& pool,
                              caf::actor_clock::time_point now) {
  if (!gauges) return;
  if (const double fill = ledger.fill(team, model, now); fill >= 0) gauges->set_bucket(team, model, fill);
  auto it = gates.find(pool);
  if (it == gates.end()) return;
  constexpr std::size_t kNone = static_cast<std::size_t>(-1);
  auto& shown = queues_shown.try_emplace(pool, std::array<std::size_t, 3>{kNone, kNone, kNone}).first->second;
  std::size_t k = 0;
  for (auto tier : {engine::priority::interactive, engine::priority::standard, engine::priority::batch}) {
    const std::size_t waiting = it->second.waiting(tier);
    if (waiting != shown[k]) gauges->set_queue(pool, std::string(engine::to_string(tier)), waiting);
    shown[k++] = waiting;
  }
}

namespace {

using stateful = caf::stateful_actor<admission_state>;

void arm_sweep(stateful* self);

// A refused request counts as shed in the team's usage.
void note_refusal(stateful* self, const request& r) {
  if (r.team.empty()) return;
  if (auto m = caf::actor_cast<caf::actor>(self->system().registry().get(meter_name)))
    self->send(m, usage_note{r.id, r.team, r.model, r.version, {}, false});
}

// Sends what may run to its router; ends what was refused, refunding its charge.
void apply(stateful* self, const std::string& key, pool_gate::moves& m) {
  auto& st = self->state;
  const auto now = self->clock().now();
  for (auto& r : m.run) {
    const caf::actor router = st.pools.at(key).router;
    if (!router) {  // the pool stopped serving while it waited
      m.refused.push_back({std::move(r), admission_verdict::shed});
      continue;
    }
    // The router acknowledges at once; a router that died first (its mailbox included)
    // bounces the request back, and the client hears so now rather than never.
    // (What the bounce needs is taken before the request itself moves into the message.)
    auto bounced = [self, key, sink = r.sink, id = r.id, model = r.model](caf::error&) {
      auto& st = self->state;
      const auto now = self->clock().now();
      st.ledger.release(request_released{id, {}, true, false, "", "", ""}, now);
      st.gate_of.erase(id);
      st.captured.erase(id);
      pool_gate::moves more;
      st.gate(key).end(id, now, more);
      self->send(sink, stream_error{id, errc::unavailable, "The router of " + model + " was lost; retry.", "", 1});
      apply(self, key, more);
    };
    self->request(router, caf::infinite, std::move(r)).then([] {}, std::move(bounced));
  }
  for (auto& f : m.refused) {
    const request& r = f.r;
    st.ledger.release(request_released{r.id, {}, true, false, "", r.team, r.model}, now);
    note_refusal(self, r);
    if (st.gauges && f.why != admission_verdict::wait)
      st.gauges->count_shed(r.team, r.model,
                            f.why == admission_verdict::over_share ? "over_share" : std::string(engine::to_string(r.priority)));
    st.gate_of.erase(r.id);
    st.captured.erase(r.id);
    switch (f.why) {
      case admission_verdict::over_share:
        self->send(r.sink, stream_error{r.id, errc::over_limit,
                                        "The pool of " + key + " is full and team " + r.team +
                                            " is above its guaranteed share of it.",
                                        "", 1});
        break;
      case admission_verdict::shed:
      case admission_verdict::run:
        self->send(r.sink, stream_error{r.id, errc::shed,
                                        "The pool of " + key + " is overloaded; " +
                                            std::string(engine::to_string(r.priority)) + " requests are being shed.",
                                        "", 1});
        break;
      case admission_verdict::wait:
        self->send(r.sink, stream_error{r.id, errc::timed_out,
                                        "The request waited too long for room in the pool of " + key + ".", "", 0});
        break;
    }
  }
  m = {};
}

// A copy of an admitted request for the model's shadow version: straight to its router,
// outside the team's limits and the pool's gate; its output goes nowhere.
void shadow(stateful* self, const request& r) {
  auto& st = self->state;
  auto rt = st.routes.find(r.model);
  if (rt == st.routes.end()) return;
  const config::model_route& route = rt->second.route;
  if (route.shadow.empty() || route.shadow_percent <= 0 || route.shadow == r.version) return;
  if (!shadow_copy(route, routing_key(r))) return;
  auto it = st.pools.find(r.model + "@" + route.shadow);
  if (it == st.pools.end() || it->second.status != pool_status::serving || !it->second.router) return;
  if (!st.discard) {
    // A sink like a client's, whose target keeps nothing (a bare actor that dropped what it
    // did not expect would answer each stream message with an error, which stops the engine).
    struct discard_target final : stream_target {
      void on_tokens(stream_tokens) override {}
      void on_end(stream_end) override {}
      void on_error(stream_error) override {}
    };
    st.discard = spawn_stream_sink(self->system(), std::make_shared<discard_target>());
    self->attach_functor([sink = st.discard] { stop_sink(sink); });  // it ends with admission
  }
  request copy = r;
  copy.id.origin ^= 0x5348414457ull;  // "SHADW": apart from every client's id
  copy.version = route.shadow;
  copy.sink = st.discard;
  copy.team.clear();  // not the team's use: neither charged nor metered to it
  st.shadows[copy.id] = r.model;
  self->request(it->second.router, caf::infinite, std::move(copy))
      .then([] {}, [self, id = copy.id](caf::error&) { self->state.shadows.erase(id); });
}

// One request's end on a model under rollout, to its controller.
bool report_outcome(stateful* self, const request_released& r) {
  auto& st = self->state;
  auto sh = st.shadows.find(r.id);
  const bool is_shadow = sh != st.shadows.end();
  const std::string model = is_shadow ? sh->second : r.model;
  if (is_shadow) st.shadows.erase(sh);
  auto rt = st.routes.find(model);
  if (rt != st.routes.end() && rt->second.controller &&
      (!rt->second.route.canary.empty() || !rt->second.route.shadow.empty())) {
    outcome_sample s;
    s.failed = r.failed;
    s.ttft_s = r.ttft_s;
    s.output_tokens = r.usage.completion_tokens;
    s.completed = r.completed;
    self->send(rt->second.controller, outcome_report{r.version, is_shadow, s});
  }
  return is_shadow;
}

void sweep(stateful* self) {
  auto& st = self->state;
  st.sweep_armed = false;
  const auto now = self->clock().now();
  for (auto& [key, g] : st.gates) {
    pool_gate::moves m;
    g.expire(now, m);
    apply(self, key, m);
  }
  arm_sweep(self);
}

// What this region's teams asked for since the last report, in tokens per minute, smoothed
// over reports (half the weight on the newest).
region_use_report report_use(stateful* self) {
  auto& st = self->state;
  const auto now = self->clock().now();
  const double minutes = std::chrono::duration<double>(now - st.asked_since).count() / 60;
  st.asked_since = now;
  region_use_report out;
  out.region = st.cfg->region;
  for (const auto& [key, tokens] : st.ledger.take_asked()) {
    const double rate = minutes > 0 ? static_cast<double>(tokens) / minutes : 0;
    auto [it, fresh] = st.asked_per_minute.try_emplace(key, rate);
    if (!fresh) it->second = 0.5 * it->second + 0.5 * rate;
    out.rows.push_back({out.region, key.first, key.second, it->second, 0});
  }
  return out;
}

void arm_sweep(stateful* self) {
  auto& st = self->state;
  if (st.sweep_armed) return;
  auto next = pool_gate::time_point::max();
  for (const auto& [key, g] : st.gates) next = std::min(next, g.next_expiry());
  if (next == pool_gate::time_point::max()) return;
  st.sweep_armed = true;
  self->delayed_send(self, std::max(caf::timespan{0}, next - self->clock().now()), tick_atom::value);
}

}  // namespace

caf::behavior admission(caf::stateful_actor<admission_state>* self, std::shared_ptr<const config::kiln_config> cfg,
                        std::shared_ptr<const config::tenancy> tenants, std::shared_ptr<fleet_gauges> gauges,
                        std::shared_ptr<config::capture_log> capture) {
  self->state.cfg = std::move(cfg);
  self->state.capture = std::move(capture);
  self->state.started = self->clock().now();
  self->state.asked_since = self->state.started;
  self->state.gauges = std::move(gauges);
  self->state.ledger = team_ledger(std::move(tenants));
  for (const auto& p : self->state.cfg->pools) {  // every configured pool is known, loading until it says otherwise
    pool_update u;
    u.model = p.model;
    u.version = p.version;
    self->state.pools[p.model + "@" + p.version] = u;
  }
  // Cases are tried in order: a request and its release, every request's two messages, first.
  return {
      [self](request& r) -> one_way {
        auto& st = self->state;
        const auto now = self->clock().now();
        auto admitted = st.admit(r, now);
        if (auto* err = std::get_if<stream_error>(&admitted)) {
          self->send(r.sink, std::move(*err));
          return handled;
        }
        r.priority = st.ledger.clamp(r.team, r.priority);
        if (auto refused = st.ledger.admit(r, now)) {
          self->send(r.sink, st.ledger.limit_info(r, now));
          if (refused->code == errc::over_limit) note_refusal(self, r);
          self->send(r.sink, std::move(*refused));
          return handled;
        }
        // The x-ratelimit-* headers, for a team with a limit on this model (none: no message).
        if (auto info = st.ledger.limit_info(r, now); info.limit_tokens > 0) self->send(r.sink, std::move(info));
        const std::string key = r.model + "@" + r.version;
        const std::int64_t charge = request_tokens(r);
        const double share = st.ledger.share(r.team, r.model);
        st.gate_of[r.id] = key;
        if (st.capture) {
          const double t = std::chrono::duration<double>(now - st.started).count();
          st.captured[r.id] = {t, r.team, static_cast<std::uint8_t>(r.priority), r.conversation_id,
                               config::block_hashes_of(r.prompt.vec()), static_cast<std::int32_t>(r.prompt.size()), 0};
        }
        shadow(self, r);
        const std::string team = r.team, model = r.model;
        pool_gate::moves m;
        st.gate(key).arrive(std::move(r), charge, share, now, m);
        apply(self, key, m);
        st.publish(team, model, key, now);
        arm_sweep(self);
        return handled;
      },
      [self](request_released& r) -> one_way {
        if (report_outcome(self, r)) return handled;  // a shadow copy: nothing was charged
        auto& st = self->state;
        const auto now = self->clock().now();
        st.ledger.release(r, now);
        if (auto c = st.captured.find(r.id); c != st.captured.end()) {
          // A served request goes to the capture with what it produced.
          if (r.completed && r.usage_known) {
            c->second.output_tokens = r.usage.completion_tokens;
            st.capture->add(std::move(c->second));
          }
          st.captured.erase(c);
        }
        const std::optional<std::string> gate = st.gate_of.take(r.id);
        if (!gate) return handled;
        const std::string& key = *gate;
        pool_gate::moves m;
        st.gate(key).end(r.id, now, m);
        apply(self, key, m);
        st.publish(r.team, r.model, key, now);
        return handled;
      },
      [self](tokenize_request& q) -> tokenize_result { return run_tokenize(self->state, q); },
      [self](tick_atom) -> one_way {
        sweep(self);
        return handled;
      },
      [self](batch_room_ask& q) -> batch_room {
        auto& st = self->state;
        batch_room out;
        for (auto& [key, u] : st.pools) {
          if (u.model != q.model || !u.runtime || u.status != pool_status::serving) continue;
          ++out.serving;
          const pool_gate& g = st.gate(key);
          out.online_waiting += static_cast<std::int64_t>(g.waiting(engine::priority::interactive) +
                                                          g.waiting(engine::priority::standard));
          out.batch_waiting += static_cast<std::int64_t>(g.waiting(engine::priority::batch));
          out.online_in_flight += g.tier_in_flight(engine::priority::interactive) + g.tier_in_flight(engine::priority::standard);
          out.batch_in_flight += g.tier_in_flight(engine::priority::batch);
          out.capacity += g.capacity();
        }
        return out;
      },
      [self](tenancy_update& u) { self->state.ledger.set_tenancy(std::move(u.tenants), self->clock().now()); },
      [self](region_use_ask) -> region_use_report { return report_use(self); },
      [self](region_shares_update& u) { self->state.ledger.set_region_shares(std::move(u.shares), self->clock().now()); },
      [self](pool_update& u) {
        auto& st = self->state;
        const std::string key = u.model + "@" + u.version;
        st.pools[key] = std::move(u);
        const pool_update& now = st.pools[key];
        if (auto g = st.gates.find(key); g != st.gates.end() && now.runtime && now.serving_replicas >= 0) {
          pool_gate::moves m;
          g->second.set_capacity(capacity_of(now), m);
          apply(self, key, m);
        }
      },
      [self](route_update& u) { self->state.routes[u.route.model] = std::move(u); },
  };
}

}  // namespace kiln::actors
