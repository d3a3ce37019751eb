#include "actors/router_shard.hpp"

#include <algorithm>
#include <cmath>
#include <optional>

#include <caf/all.hpp>
#include <xxhash.h>

#include "actors/chaos.hpp"
#include "actors/meter.hpp"
#include "actors/one_way.hpp"

namespace kiln::actors {

namespace {

constexpr double kLoadBound = 1.25;     // seed 000: skip replicas above 1.25x the average
constexpr std::size_t kKeyTokens = 64;  // prompt tokens that make a key without a conversation id
constexpr int kMissedBeatsOut = 3;      // seed 000: off the ring after 3 missed heartbeats
constexpr std::int32_t kRetryAfterS = 1;

std::uint64_t mix(std::uint64_t a, std::uint64_t b) {
  const std::uint64_t both[2] = {a, b};
  return XXH3_64bits(both, sizeof both);
}

double ms(caf::timespan d) { return std::chrono::duration<double, std::milli>(d).count(); }

}  // namespace

std::uint64_t affinity_key(const request& r) {
  const std::uint64_t team = XXH3_64bits(r.team.data(), r.team.size());
  if (!r.conversation_id.empty())
    return mix(team, XXH3_64bits(r.conversation_id.data(), r.conversation_id.size()));
  const std::size_t n = std::min(r.prompt.size(), kKeyTokens);
  return mix(team, XXH3_64bits(r.prompt.data(), n * sizeof(std::int32_t)));
}

routing_policy routing_policy_from(std::string_view name) {
  if (name == "round_robin") return routing_policy::round_robin;
  if (name == "least_tokens") return routing_policy::least_tokens;
  return routing_policy::prefix_affinity_bounded;
}

int router_shard_state::missed_beats(const entry& e, caf::actor_clock::time_point now) const {
  if (!e.beat) return 0;
  const double periods = ms(now - e.last_beat) / ms(cfg.heartbeat);
  return periods < 1.5 ? 0 : static_cast<int>(std::floor(periods - 0.5));
}

caf::actor_clock::time_point router_shard_state::beat_cutoff(caf::actor_clock::time_point now) const {
  // missed_beats reaches 3 once 3.5 periods have passed since the last beat.
  return now - (cfg.heartbeat * (2 * kMissedBeatsOut + 1)) / 2;
}

bool router_shard_state::in_ranking(const entry& e, caf::actor_clock::time_point now) const {
  return e.phase == replica_phase::serving && e.engine && e.beat && e.last_beat > beat_cutoff(now);
}

router_shard_state::entry& router_shard_state::add_replica(const std::string& id, caf::actor replica) {
  entry e;
  e.replica_id = id;
  e.id_hash = XXH3_64bits(id.data(), id.size());
  e.replica = std::move(replica);
  replicas.push_back(std::move(e));
  return replicas.back();
}

int router_shard_state::pick(std::uint64_t key, std::int64_t tokens, caf::actor_clock::time_point now,
                             const std::vector<std::string>& exclude) const {
  const auto cutoff = beat_cutoff(now);
  auto eligible = [&](const entry& e) {
    return e.phase == replica_phase::serving && e.engine && e.beat && e.last_beat > cutoff &&
           (exclude.empty() || std::find(exclude.begin(), exclude.end(), e.replica_id) == exclude.end());
  };
  std::int64_t total = tokens;
  std::size_t n = 0;
  for (const auto& e : replicas) {
    if (!eligible(e)) continue;
    total += e.tokens();
    ++n;
  }
  if (n == 0) return -1;
  if (cfg.policy == routing_policy::round_robin) {
    for (std::size_t k = 0; k < replicas.size(); ++k) {
      const std::size_t i = (rr_next + k) % replicas.size();
      if (!eligible(replicas[i])) continue;
      rr_next = i + 1;
      return static_cast<int>(i);
    }
    return -1;
  }
  const double bound = kLoadBound * static_cast<double>(total) / static_cast<double>(n);
  int best = -1, least = -1;
  std::uint64_t best_score = 0;
  for (std::size_t i = 0; i < replicas.size(); ++i) {
    const auto& e = replicas[i];
    if (!eligible(e)) continue;
    if (least < 0 || e.tokens() < replicas[static_cast<std::size_t>(least)].tokens()) least = static_cast<int>(i);
    if (cfg.policy == routing_policy::least_tokens || static_cast<double>(e.tokens()) > bound) continue;
    const std::uint64_t score = mix(key, e.id_hash);
    if (best < 0 || score > best_score) {
      best = static_cast<int>(i);
      best_score = score;
    }
  }
  return best >= 0 ? best : least;
}

router_shard_state::entry* router_shard_state::find_replica(const std::string& id) {
  for (auto& e : replicas)
    if (e.replica_id == id) return &e;
  return nullptr;
}

bool router_shard_state::on_status(const replica_status& s, caf::actor_clock::time_point now) {
  entry* e = find_replica(s.replica_id);
  if (!e) return false;
  const bool new_engine = s.engine && s.engine != e->engine;
  if (new_engine) {
    // A fresh engine: what was sent to the old one is not in its figures.
    e->sent = 0;
    e->acked = 0;
  }
  if (s.engine) e->engine = s.engine;
  e->phase = s.phase;
  e->beat = true;
  e->last_beat = now;
  e->load = s.load;
  e->reported = s.load.tokens_in_flight;
  e->acked = std::max(e->acked, s.load.received_tokens);
  e->restarts = s.restarts;
  return new_engine;
}

pool_view router_shard_state::view(caf::actor_clock::time_point now) const {
  pool_view v;
  v.model = cfg.model;
  v.version = cfg.version;
  v.status = "serving";
  std::int64_t prompt = 0, cached = 0;
  for (const auto& e : replicas) {
    replica_view r;
    r.replica_id = e.replica_id;
    r.version = cfg.version;
    r.phase = std::string(to_string(e.phase));
    r.queue_depth = e.load.waiting;
    r.tokens_in_flight = e.tokens();
    r.last_heartbeat_age_ms = e.beat ? ms(now - e.last_beat) : -1;
    r.missed_heartbeats = missed_beats(e, now);
    r.in_ranking = in_ranking(e, now);
    r.restarts = e.restarts;
    v.replicas.push_back(std::move(r));
    v.queue_depth += e.load.waiting;
    v.tokens_in_flight += e.tokens();
    prompt += e.load.prompt_tokens_total;
    cached += e.load.cached_tokens_total;
  }
  v.prefix_hit_rate = prompt > 0 ? static_cast<double>(cached) / static_cast<double>(prompt) : 0;
  v.active_requests = static_cast<std::int64_t>(owned.active());
  v.retried = retried;
  return v;
}

void router_shard_state::count(errc code) {
  if (gauges) gauges->count_outcome(cfg.model, cfg.version, std::string(to_string(code)));
}

namespace {

using stateful = caf::stateful_actor<router_shard_state>;

caf::actor meter_of(stateful* self) {
  return caf::actor_cast<caf::actor>(self->system().registry().get(meter_name));
}

usage_note note_of(stateful* self, const owned_request& o, const engine::usage& used) {
  return {o.req.id, o.req.team, self->state.cfg.model, self->state.cfg.version, used, true};
}

// Tells admission the request has ended (refund, slot), and the meter what it used. Without
// a usage report, a request that had no first token used nothing; one that had is charged in
// full and metered with its prompt (its engine took the count with it).
void release(stateful* self, const owned_request& o, std::optional<engine::usage> used, bool completed,
             bool metered = false, bool failed = false) {
  request_released r;
  r.id = o.req.id;
  r.completed = completed;
  r.failed = failed;
  r.ttft_s = o.ttft_s;
  r.version = self->state.cfg.version;
  r.team = o.req.team;
  r.model = self->state.cfg.model;
  if (used) r.usage = *used;
  else if (o.first_token) r.usage_known = false;
  if (!metered)
    if (auto m = meter_of(self)) {
      engine::usage u = r.usage;
      if (!r.usage_known) u = {static_cast<int>(o.req.prompt.size()), 0, 0};
      self->send(m, note_of(self, o, u));
    }
  if (o.admission) self->send(o.admission, std::move(r));
}

// Ends a request at its sink with an error; the owner forgets it.
void fail(stateful* self, owned_request& o, errc code, std::string message, std::int32_t retry_after_s = 0,
          std::optional<engine::usage> used = std::nullopt) {
  auto& st = self->state;
  st.count(code);
  if (o.first_token && st.gauges) st.gauges->count_outcome(st.cfg.model, st.cfg.version, "failed_mid_stream");
  self->send(o.req.sink, stream_error{o.req.id, code, std::move(message), "", retry_after_s});
  release(self, o, used, false, false, true);
  st.owned.erase(o.req.id);
}

void dispatch(stateful* self, owned_request& o, errc why_retry) {
  auto& st = self->state;
  const auto now = self->clock().now();
  const std::int64_t tokens = request_tokens(o.req);
  const int i = st.pick(affinity_key(o.req), tokens, now, o.tried);
  if (i < 0) {
    if (o.tried.empty())
      return fail(self, o, errc::unavailable, "No replica of " + st.cfg.model + "@" + st.cfg.version + " is serving.",
                  kRetryAfterS);
    return fail(self, o, why_retry, "The request's replica was lost and no other replica could take it.",
                kRetryAfterS);
  }
  auto& e = st.replicas[static_cast<std::size_t>(i)];
  e.sent += tokens;
  o.req.attempt = static_cast<std::uint8_t>(o.tried.size());
  o.req.owner = caf::actor_cast<caf::actor>(self);
  o.tried.push_back(e.replica_id);
  o.engine = e.engine;
  self->send(e.engine, o.req);
}

// Before the first token, a lost, failed or refusing replica sends the request on.
void retry_or_fail(stateful* self, owned_request& o, errc code, const std::string& message,
                   std::optional<engine::usage> used = std::nullopt) {
  auto& st = self->state;
  if (o.first_token || !retryable(code)) return fail(self, o, code, message, 0, used);
  if (o.tried.size() >= kMaxAttempts)
    return fail(self, o, code, message + " (tried " + std::to_string(o.tried.size()) + " replicas)", kRetryAfterS);
  if (!o.retried && !st.owned.retry_allowed())
    return fail(self, o, errc::retry_budget, "Too many requests are being retried on " + st.cfg.model + "; " + message,
                kRetryAfterS);
  if (!o.retried) {  // counted once per request, however many retries it takes
    ++st.retried;
    if (st.gauges) st.gauges->count_outcome(st.cfg.model, st.cfg.version, "retried");
  }
  st.owned.begin_retry(o);
  o.engine = nullptr;
  dispatch(self, o, code);
}

void arm_sweep(stateful* self) {
  auto& st = self->state;
  if (st.sweep_armed) return;
  // Deadlines at the front that can no longer fire go now (a first token came, or the request
  // ended), so the timer waits for one that may: without this it would wake once per request.
  while (!st.first_token_due.empty()) {
    const owned_request* o = st.owned.find(st.first_token_due.front().second);
    if (o && !o->first_token) break;
    st.first_token_due.pop_front();
  }
  while (!st.end_due.empty() && !st.owned.find(st.end_due.front().second)) st.end_due.pop_front();
  std::optional<caf::actor_clock::time_point> next;
  if (!st.first_token_due.empty()) next = st.first_token_due.front().first;
  if (!st.end_due.empty() && (!next || st.end_due.front().first < *next)) next = st.end_due.front().first;
  if (!next) return;
  st.sweep_armed = true;
  self->delayed_send(self, std::max(caf::timespan{0}, *next - self->clock().now()), tick_atom::value);
}

void own(stateful* self, request& r) {
  auto& st = self->state;
  const auto now = self->clock().now();
  st.first_token_due.emplace_back(now + st.cfg.first_token_timeout, r.id);
  st.end_due.emplace_back(now + st.cfg.request_timeout, r.id);
  owned_request& o = st.owned.add(std::move(r), now);
  o.admission = caf::actor_cast<caf::actor>(self->current_sender());
  dispatch(self, o, errc::replica_lost);
  arm_sweep(self);
}

void on_done(stateful* self, job_done& d) {
  auto& st = self->state;
  owned_request* o = st.owned.find(d.id, d.attempt);
  if (!o) return;
  if (d.finish == engine::finish_reason::cancelled) {
    release(self, *o, d.usage, false);  // the client went away
    st.owned.erase(d.id);
    return;
  }
  stream_end end;
  end.id = d.id;
  end.finish_reason = std::string(engine::to_string(d.finish));
  end.prompt_tokens = d.usage.prompt_tokens;
  end.completion_tokens = d.usage.completion_tokens;
  end.cached_tokens = d.usage.cached_tokens;
  end.model_version = st.cfg.version;
  end.region = st.cfg.region;
  end.replica_id = std::move(d.replica_id);
  end.engine_ttft_ms = d.engine_ttft_ms;
  end.attempts = static_cast<std::int32_t>(o->tried.size());
  if (st.gauges) st.gauges->count_outcome(st.cfg.model, st.cfg.version, "completed");
  // The end reaches the client once its usage record is durable: what it was told, counts.
  if (auto m = meter_of(self)) self->send(m, metered_end{note_of(self, *o, d.usage), std::move(end), o->req.sink});
  else self->send(o->req.sink, std::move(end));
  release(self, *o, d.usage, true, true);
  st.owned.erase(d.id);
}

void expire(stateful* self, const request_id& id, bool first_token) {
  auto& st = self->state;
  owned_request* o = st.owned.find(id);
  if (!o || (first_token && o->first_token)) return;
  if (o->engine) self->send(o->engine, cancel_job{id});
  const auto limit = first_token ? st.cfg.first_token_timeout : st.cfg.request_timeout;
  fail(self, *o, errc::timed_out,
       std::string(first_token ? "No first token within " : "The request did not finish within ") +
           std::to_string(static_cast<long long>(ms(limit))) + " ms.");
}

// Ends what is due (requests that ended meanwhile are skipped), then arms for the next.
void sweep(stateful* self) {
  auto& st = self->state;
  st.sweep_armed = false;
  const auto now = self->clock().now();
  while (!st.first_token_due.empty() && st.first_token_due.front().first <= now) {
    const request_id id = st.first_token_due.front().second;
    st.first_token_due.pop_front();
    expire(self, id, true);
  }
  while (!st.end_due.empty() && st.end_due.front().first <= now) {
    const request_id id = st.end_due.front().second;
    st.end_due.pop_front();
    expire(self, id, false);
  }
  arm_sweep(self);
}

using rank_atom = caf::atom_constant<caf::atom("rank")>;

// The ranking's size, for the node's health (a pool none of whose replicas ranks serves
// nothing), published when it changes. Called on every heartbeat and engine loss.
void publish_ranked(stateful* self) {
  auto& st = self->state;
  if (!st.gauges) return;
  const auto now = self->clock().now();
  int n = 0;
  for (const auto& e : st.replicas) n += st.in_ranking(e, now);
  if (n == st.ranked_published) return;
  st.ranked_published = n;
  st.gauges->set_ranked(st.cfg.model, st.cfg.version, n);
}

// An engine ended: its requests were lost with it (those it failed itself said so first).
void on_engine_down(stateful* self, const caf::down_msg& dm) {
  auto& st = self->state;
  for (auto& e : st.replicas)
    if (e.engine && e.engine.address() == dm.source) e.engine = nullptr;
  publish_ranked(self);
  for (const request_id& id : st.owned.on_engine(dm.source)) {
    if (owned_request* o = st.owned.find(id))
      retry_or_fail(self, *o, errc::replica_lost, "The replica serving the request was lost.");
  }
}

// The router is told to stop: its requests end now rather than wait for their clients.
void end_all(stateful* self, errc code, const std::string& message) {
  for (const auto& id : self->state.owned.ids()) {
    owned_request* o = self->state.owned.find(id);
    if (o->engine) self->send(o->engine, cancel_job{id});
    fail(self, *o, code, message, kRetryAfterS);
  }
}

}  // namespace

caf::behavior router_shard(stateful* self, router_settings cfg, std::shared_ptr<fleet_gauges> gauges) {
  self->state.cfg = std::move(cfg);
  self->state.gauges = std::move(gauges);
  self->set_down_handler([self](caf::down_msg& dm) { on_engine_down(self, dm); });
  // Replicas leave the ranking by silence too: the count is looked at every heartbeat as well.
  if (self->state.gauges) self->send(self, rank_atom::value);
  self->set_exit_handler([self](caf::exit_msg& em) {
    end_all(self, errc::unavailable, "The pool of " + self->state.cfg.model + " is stopping.");
    // A stopped router ranks nothing (its pool may have published so before this arrived).
    if (auto& g = self->state.gauges) g->set_ranked(self->state.cfg.model, self->state.cfg.version, 0);
    self->quit(em.reason);
  });
  // Cases are tried in order: a request's own messages first.
  return {
      [self](request& r) {
        own(self, r);
        return caf::unit;  // admission's acknowledgement
      },
      [self](first_token& f) -> one_way {
        if (owned_request* o = self->state.owned.find(f.id, f.attempt)) {
          o->first_token = true;
          o->ttft_s = std::chrono::duration<double>(self->clock().now() - o->since).count();
        }
        return handled;
      },
      [self](job_done& d) -> one_way {
        on_done(self, d);
        return handled;
      },
      [self](job_failed& f) -> one_way {
        if (owned_request* o = self->state.owned.find(f.id, f.attempt)) retry_or_fail(self, *o, f.code, f.message, f.usage);
        return handled;
      },
      [self](replica_gone& g) {
        auto& reps = self->state.replicas;
        std::erase_if(reps, [&](const auto& e) { return e.replica_id == g.replica_id; });
      },
      [self](replica_set& set) {
        auto& st = self->state;
        st.replicas.clear();
        for (std::size_t i = 0; i < set.replicas.size(); ++i) st.add_replica(set.ids[i], set.replicas[i]);
      },
      [self](replica_up& up) {
        auto* e = self->state.find_replica(up.replica_id);
        if (!e) {  // one the pool added (scaling up)
          self->state.add_replica(up.replica_id, up.replica);
          return;
        }
        const std::uint64_t id_hash = e->id_hash;
        *e = {};
        e->replica_id = up.replica_id;
        e->id_hash = id_hash;
        e->replica = up.replica;
      },
      [self](replica_status& s) -> one_way {
        if (self->state.on_status(s, self->clock().now())) self->monitor(s.engine);
        publish_ranked(self);
        return handled;
      },
      [self](tick_atom) -> one_way {
        sweep(self);
        return handled;
      },
      [self](rank_atom) -> one_way {
        publish_ranked(self);
        self->delayed_send(self, self->state.cfg.heartbeat, rank_atom::value);
        return handled;
      },
      [self](state_atom) { return self->state.view(self->clock().now()); },
      [self](chaos_order& o) {
        if (o.action == chaos_action::freeze) freeze(self, o.seconds);
      },
  };
}

}  // namespace kiln::actors
