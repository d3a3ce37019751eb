#include "actors/remote_engine.hpp"

#include <algorithm>
#include <cstdio>

#include <caf/all.hpp>
#include <nlohmann/json.hpp>

#include "actors/chaos.hpp"
#include "actors/engine_parts.hpp"

namespace kiln::actors::detail {
/// What one read of the upstream client brought.
struct upstream_events {
  std::vector<engine::upstream::stream_event> events;
};
/// A health poll's answer.
struct upstream_health {
  engine::upstream::health h;
};
}  // namespace kiln::actors::detail

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kiln::actors::detail::upstream_events)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kiln::actors::detail::upstream_health)

namespace kiln::actors {

using nlohmann::json;
namespace up = engine::upstream;

std::pair<std::string, std::string> upstream_body(const request& r, const pool_runtime& pool) {
  const config::pool_config& cfg = *pool.cfg;
  json b = json::object();
  b["model"] = cfg.upstream_model.empty() ? cfg.model : cfg.upstream_model;
  b["stream"] = true;
  b["stream_options"] = {{"include_usage", true}};
  std::string path = "/chat/completions";
  if (!r.chat_json.empty()) {
    const json in = json::parse(r.chat_json, nullptr, false);
    if (in.is_object() && in.contains("messages")) b["messages"] = in["messages"];
    if (in.is_object() && in.contains("tools") && !in["tools"].is_null()) b["tools"] = in["tools"];
  }
  if (!b.contains("messages") && !r.messages.empty()) {
    json msgs = json::array();
    for (const auto& t : r.messages) msgs.push_back({{"role", t.role}, {"content", t.content}});
    b["messages"] = std::move(msgs);
  }
  if (!b.contains("messages")) {
    // A completion (or a request that arrived as tokens): the prompt as text.
    path = "/completions";
    std::string text = r.prompt_text;
    if (!text.empty() && !r.prompt_specials) b["add_special_tokens"] = false;  // asked so; the upstream's default is true
    if (text.empty())
      for (const auto id : r.prompt) text += pool.tokenizer->decode(id);
    b["prompt"] = std::move(text);
  }
  const auto& s = r.sampling;
  b["max_tokens"] = s.max_tokens > 0 ? s.max_tokens : cfg.default_max_tokens;
  b["temperature"] = s.temperature;
  b["top_p"] = s.top_p;
  if (s.top_k > 0) b["top_k"] = s.top_k;
  if (s.seed) b["seed"] = *s.seed;
  if (!s.stop.empty()) b["stop"] = s.stop;
  if (s.presence_penalty != 0) b["presence_penalty"] = s.presence_penalty;
  if (s.frequency_penalty != 0) b["frequency_penalty"] = s.frequency_penalty;
  if (s.repetition_penalty != 1) b["repetition_penalty"] = s.repetition_penalty;
  if (s.min_tokens > 0) b["min_tokens"] = s.min_tokens;
  if (!s.stop_token_ids.empty()) b["stop_token_ids"] = s.stop_token_ids;
  if (s.ignore_eos) b["ignore_eos"] = true;
  if (!s.logit_bias.empty()) {
    json bias = json::object();
    for (const auto& [t, v] : s.logit_bias) bias[std::to_string(t)] = v;
    b["logit_bias"] = std::move(bias);
  }
  return {path, b.dump(-1, ' ', false, json::error_handler_t::replace)};
}

engine_load remote_engine_state::load() const {
  engine_load l = totals;
  // Requests: kiln's own (a drain waits for these, not for other clients of the upstream).
  const auto counts = client ? client->last_counts() : up::client::counts{};
  l.running = static_cast<std::int32_t>(counts.busy);
  l.waiting = static_cast<std::int32_t>(counts.queued);
  // Tokens in flight rank the replica: kiln's own, or more where the upstream's metrics show
  // it busier (other clients too): its requests at kiln's mean size, its KV use at the
  // configured capacity.
  l.tokens_in_flight = own_tokens;
  const double upstream_requests = std::max(0.0, upstream_load.running) + std::max(0.0, upstream_load.waiting);
  if (upstream_requests > 0) {
    const double mean = jobs.empty() ? static_cast<double>(pool ? pool->cfg->default_max_tokens : 0)
                                     : static_cast<double>(own_tokens) / static_cast<double>(jobs.size());
    l.tokens_in_flight = std::max(l.tokens_in_flight, static_cast<std::int64_t>(upstream_requests * mean));
  }
  if (upstream_load.kv_usage >= 0 && pool && pool->cfg->capacity_tokens > 0)
    l.tokens_in_flight = std::max(l.tokens_in_flight, static_cast<std::int64_t>(upstream_load.kv_usage *
                                                                                static_cast<double>(pool->cfg->capacity_tokens)));
  return l;
}

void remote_engine_state::publish() const {
  if (!gauges) return;
  const engine_load l = load();
  gauges->set({who.replica_id, who.model, who.version, l.running, l.waiting, l.tokens_in_flight, 0, 0, 0, 0, 0, 0,
               totals.prompt_tokens_total, totals.cached_tokens_total});
}

namespace {

using stateful = caf::stateful_actor<remote_engine_state>;

bool owner_alive(const remote_engine_state& st, const remote_engine_state::job& j) {
  return engine_parts::owner_alive(st.gone_owners, j.owner);
}

void watch(stateful* self, const caf::actor& a) { engine_parts::watch(self, self->state.watched, a); }

void forget(remote_engine_state& st, std::uint64_t seq) {
  auto it = st.jobs.find(seq);
  if (it == st.jobs.end()) return;
  st.own_tokens -= it->second.tokens;
  st.by_request.erase(it->second.id);
  st.jobs.erase(it);
}

// The upstream's answer failed: the owner decides (another replica before the first token,
// one error event after); with no owner left, the sink hears the error.
void fail_job(stateful* self, remote_engine_state::job& j, errc code, const std::string& msg) {
  auto& st = self->state;
  engine::usage used = j.usage;
  used.prompt_tokens = j.prompt_tokens;
  used.completion_tokens = std::max(used.completion_tokens, j.chunks);
  if (owner_alive(st, j)) self->send(j.owner, job_failed{j.id, j.attempt, code, msg, used});
  else if (j.sink) self->send(j.sink, stream_error{j.id, code, msg, "", 0});
}

errc code_of(const up::stream_event& e) {
  switch (e.why) {
    case up::failure::refused: return errc::unavailable;
    case up::failure::stalled: return errc::timed_out;
    case up::failure::broken: return errc::replica_lost;
    case up::failure::status:
      if (e.http_status == 400 || e.http_status == 422) {
        const bool length = e.message.find("context") != std::string::npos || e.message.find("maximum") != std::string::npos;
        return length ? errc::context_too_long : errc::invalid_request;
      }
      if (e.http_status == 408 || e.http_status == 504) return errc::timed_out;
      if (e.http_status >= 500 && e.http_status != 503) return errc::engine_failed;
      return errc::unavailable;  // 401/403/404 (kiln's key or model name), 429, 503: another replica may serve
  }
  return errc::internal;
}

engine::finish_reason finish_of(const std::string& s) {
  return s == "length" ? engine::finish_reason::length : engine::finish_reason::stop;
}

void finish_job(stateful* self, remote_engine_state::job& j) {
  auto& st = self->state;
  engine::usage u = j.usage;
  if (!j.has_usage) {  // an upstream that gives no usage: kiln's own counts
    u.prompt_tokens = j.prompt_tokens;
    u.completion_tokens = j.chunks;
  }
  const auto finish = j.finish == engine::finish_reason::none ? engine::finish_reason::stop : j.finish;
  st.totals.prompt_tokens_total += u.prompt_tokens;
  st.totals.cached_tokens_total += u.cached_tokens;
  if (owner_alive(st, j)) {
    self->send(j.owner, job_done{j.id, j.attempt, finish, u, st.who.replica_id, std::max(0.0, j.ttft_ms)});
    return;
  }
  self->send(j.sink, engine_parts::end_at_sink(j.id, finish, u, st.who, j.ttft_ms, j.attempt));
}

std::string where(const remote_engine_state& st) { return "upstream " + st.upstream + " of " + st.who.replica_id; }

// One read's events: each request's text leaves as one message, its first token announced
// to its owner before; its end after its last tokens.
void on_events(stateful* self, std::vector<up::stream_event>& events) {
  auto& st = self->state;
  const auto now = self->clock().now();
  std::uint64_t seq = 0;
  std::string text;
  std::int32_t n = 0;
  auto flush = [&] {
    auto it = st.jobs.find(seq);
    if (it == st.jobs.end() || (n == 0 && text.empty())) return;
    auto& j = it->second;
    const bool first = j.ttft_ms < 0;
    if (first) {
      j.ttft_ms = std::chrono::duration<double, std::milli>(now - j.arrival).count();
      if (owner_alive(st, j)) self->send(j.owner, first_token{j.id, j.attempt});
    }
    self->send(j.sink, stream_tokens{j.id, std::move(text), n, first ? j.prompt_tokens : -1, -1, {}, {}});
    text.clear();
    n = 0;
  };
  for (auto& e : events) {
    if (e.id != seq) {
      flush();
      seq = e.id;
    }
    auto it = st.jobs.find(e.id);
    if (it == st.jobs.end()) continue;  // cancelled, or ended already
    auto& j = it->second;
    if (e.failed) {
      flush();
      fail_job(self, j, code_of(e), "The " + where(st) + " failed: " + e.message);
      forget(st, e.id);
      continue;
    }
    auto& c = e.data;
    if (c.is_error) {
      flush();
      st.client->cancel(e.id);
      fail_job(self, j, c.error_code == "timeout" || c.error_code == "timed_out" ? errc::timed_out : errc::engine_failed,
               "The " + where(st) + " reported an error: " + c.error_message);
      forget(st, e.id);
      continue;
    }
    if (!c.content.empty()) {
      text += c.content;
      ++n;
      ++j.chunks;
    }
    if (!c.finish_reason.empty()) j.finish = finish_of(c.finish_reason);
    if (c.has_usage) {
      j.has_usage = true;
      j.usage = {c.prompt_tokens, c.completion_tokens, c.cached_tokens};
    }
    if (c.done) {
      flush();
      finish_job(self, j);
      forget(st, e.id);
    }
  }
  flush();
  st.publish();
}

void fail_all(stateful* self, const std::string& why) {
  auto& st = self->state;
  for (auto& [seq, j] : st.jobs) {
    st.client->cancel(seq);
    fail_job(self, j, errc::engine_failed, "The " + where(st) + " failed: " + why);
  }
  st.jobs.clear();
  st.by_request.clear();
  st.own_tokens = 0;
}

void poll(stateful* self) {
  auto& st = self->state;
  caf::weak_actor_ptr me = caf::actor_cast<caf::weak_actor_ptr>(self->ctrl());
  st.client->poll([me](up::health h) {
    if (auto a = caf::actor_cast<caf::actor>(me)) caf::anon_send(a, detail::upstream_health{std::move(h)});
  });
}

}  // namespace

caf::behavior remote_engine(stateful* self, engine_identity who, std::string upstream,
                            std::shared_ptr<const pool_runtime> pool, std::shared_ptr<fleet_gauges> gauges,
                            caf::actor parent) {
  auto& st = self->state;
  st.who = std::move(who);
  st.upstream = std::move(upstream);
  st.pool = pool;
  st.gauges = std::move(gauges);
  const config::pool_config& cfg = *pool->cfg;
  const auto target = up::parse_endpoint(st.upstream);
  if (!target) {
    const std::string why = "the upstream " + st.upstream + " is not an http:// base URL";
    self->send(parent, engine_unloadable{st.who.replica_id, why});
    self->quit();
    return {};
  }
  up::client_options o;
  o.where = *target;
  o.api_key = cfg.upstream_api_key;
  o.max_connections = cfg.upstream_connections;
  o.stall_timeout_ms = cfg.first_token_timeout_ms;
  o.poll_timeout_ms = std::max(50, cfg.heartbeat_ms * 9 / 10);
  caf::weak_actor_ptr me = caf::actor_cast<caf::weak_actor_ptr>(self->ctrl());
  st.client = std::make_unique<up::client>(o, [me](std::vector<up::stream_event>&& ev) {
    if (auto a = caf::actor_cast<caf::actor>(me)) caf::anon_send(a, detail::upstream_events{std::move(ev)});
  });
  self->attach_functor([g = st.gauges, id = st.who.replica_id] {
    if (g) g->erase(id);
  });
  self->set_down_handler([self](caf::down_msg& dm) {
    auto& st = self->state;
    st.watched.erase(dm.source);
    for (auto it = st.jobs.begin(); it != st.jobs.end();) {
      auto& j = it->second;
      if (j.owner.address() == dm.source) st.gone_owners.insert(dm.source);  // its requests now end at their sinks
      if (j.client.address() != dm.source) {
        ++it;
        continue;
      }
      st.client->cancel(it->first);  // the client went away: the upstream request closes now
      if (owner_alive(st, j))
        self->send(j.owner, job_done{j.id, j.attempt, engine::finish_reason::cancelled, j.usage, st.who.replica_id, 0});
      st.own_tokens -= j.tokens;
      st.by_request.erase(j.id);
      it = st.jobs.erase(it);
    }
    st.publish();
  });
  const auto period = std::chrono::milliseconds(cfg.heartbeat_ms);
  self->send(self, tick_atom::value);
  return {
      [self, period](tick_atom) {
        auto& st = self->state;
        self->delayed_send(self, period, tick_atom::value);
        if (st.polling) {
          st.healthy = false;  // the last poll is still out: that beat is missed
          st.last_error = "no answer to the last health poll within a heartbeat";
          return;
        }
        st.polling = true;
        poll(self);
      },
      [self, parent](detail::upstream_health& m) {
        auto& st = self->state;
        st.polling = false;
        const bool was = st.healthy;
        st.healthy = m.h.ok;
        if (m.h.ok) st.upstream_load = m.h.load;
        if (!m.h.ok && (was || st.last_error != m.h.error))
          std::fprintf(stderr, "kiln: %s does not answer: %s\n", where(st).c_str(), m.h.error.c_str());
        else if (m.h.ok && !was && st.ready)
          std::fprintf(stderr, "kiln: %s answers again\n", where(st).c_str());
        st.last_error = m.h.error;
        if (m.h.ok && !st.ready) {
          st.ready = true;
          std::fprintf(stderr, "kiln: %s is ready\n", where(st).c_str());
          self->send(parent, engine_ready{st.who.replica_id});
        }
        st.publish();
      },
      [self](detail::upstream_events& m) { on_events(self, m.events); },
      [self](request& r) {
        auto& st = self->state;
        st.totals.received_tokens += request_tokens(r);
        const std::uint64_t seq = ++st.next_seq;
        remote_engine_state::job j;
        j.id = r.id;
        j.sink = r.sink;
        j.owner = r.owner;
        j.client = r.client ? r.client : r.sink;
        j.attempt = r.attempt;
        j.arrival = self->clock().now();
        j.prompt_tokens = static_cast<int>(r.prompt.size());
        j.tokens = request_tokens(r);
        watch(self, j.client);
        watch(self, r.owner);
        auto [path, body] = upstream_body(r, *st.pool);
        st.client->start(seq, std::move(path), std::move(body));
        st.own_tokens += j.tokens;
        st.by_request[r.id] = seq;
        st.jobs.emplace(seq, std::move(j));
        st.publish();
      },
      [self](cancel_job& c) {
        auto& st = self->state;
        auto it = st.by_request.find(c.id);
        if (it == st.by_request.end()) return;
        st.client->cancel(it->second);
        forget(st, it->second);
        st.publish();
      },
      [self](stats_atom) -> caf::result<engine_load> {
        auto& st = self->state;
        if (!st.healthy)  // no beat: three of these and the router ranks it no more
          return caf::make_error(caf::sec::request_timeout, "the " + where(st) + " does not answer: " + st.last_error);
        return st.load();
      },
      [self](chaos_order& o) {
        switch (o.action) {
          case chaos_action::freeze: freeze(self, o.seconds); break;
          case chaos_action::slow: break;  // the upstream's pace is its own
          case chaos_action::kill: self->quit(caf::exit_reason::kill); break;
          case chaos_action::fail: fail_all(self, "injected failure (chaos)"); break;
        }
      },
      [](unslow_atom) {},
  };
}

}  // namespace kiln::actors
