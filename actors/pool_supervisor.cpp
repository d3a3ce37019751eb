#include "actors/pool_supervisor.hpp"

#include "actors/ask.hpp"

#include <algorithm>
#include <cstdio>

#include <caf/all.hpp>

#include "actors/autoscale.hpp"
#include "actors/node_supervisor.hpp"
#include "actors/upstream_calls.hpp"
#include "actors/pool_text.hpp"
#include "actors/remote_replica.hpp"
#include "actors/replica.hpp"

namespace kiln::actors::detail {
struct pool_loaded {
  std::shared_ptr<const pool_runtime> runtime;
};
}  // namespace kiln::actors::detail

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kiln::actors::detail::pool_loaded)

namespace kiln::actors {

using upstream_gone_atom = caf::atom_constant<caf::atom("upgone")>;

std::string_view to_string(pool_status s) {
  switch (s) {
    case pool_status::loading: return "loading";
    case pool_status::serving: return "serving";
    case pool_status::degraded: return "degraded";
    case pool_status::failed: return "failed";
  }
  return "failed";
}

std::string_view to_string(chaos_target t) {
  switch (t) {
    case chaos_target::engine: return "engine";
    case chaos_target::replica: return "replica";
    case chaos_target::router: return "router";
    case chaos_target::autoscaler: return "autoscaler";
    case chaos_target::store: return "store";
  }
  return "replica";
}

std::optional<chaos_target> chaos_target_from(std::string_view name) {
  for (auto t : {chaos_target::engine, chaos_target::replica, chaos_target::router, chaos_target::autoscaler,
                 chaos_target::store})
    if (to_string(t) == name) return t;
  return std::nullopt;
}

std::string replica_id_of(const config::pool_config& p, int i) {
  return p.model + "-" + p.version + "-r" + std::to_string(i);
}

pool_update pool_state::update() const {
  pool_update u;
  u.model = d.cfg->model;
  u.version = d.cfg->version;
  u.status = status;
  u.router = status == pool_status::serving ? router() : caf::actor{};
  u.runtime = runtime;
  if (runtime) u.failure = runtime->failure;
  u.retry_at = retry_at;
  u.serving_replicas = serving_replicas;
  return u;
}

void pool_state::publish() const {
  if (!d.gauges) return;
  // Serving: the router's ranking size stands; otherwise nothing ranks.
  pool_gauge g{d.cfg->model, d.cfg->version, std::string(to_string(status)), sup.restarts(), {}, {}, {},
               status == pool_status::serving ? -1 : 0};
  if (runtime && runtime->cpu) {
    g.weights = std::string(kernels::cpu::to_string(runtime->cpu->type));
    g.kernels = std::string(kernels::cpu::to_string(runtime->cpu->path));
    g.kv = runtime->cpu_kv == engine::kv_dtype::bf16 ? "bf16" : "f32";
  }
  d.gauges->set_pool(g);
}

bool pool_state::is_warm(const std::string& id) const {
  return std::find(warm_ids.begin(), warm_ids.end(), id) != warm_ids.end();
}

pool_view pool_state::own_view(caf::actor_clock::time_point now) const {
  pool_view v;
  v.model = d.cfg->model;
  v.version = d.cfg->version;
  v.status = std::string(to_string(status));
  v.restarts = sup.restarts();
  if (status == pool_status::degraded && retry_at > now)
    v.retry_after_s = static_cast<std::int32_t>(std::chrono::ceil<std::chrono::seconds>(retry_at - now).count());
  for (const auto& id : replica_ids) {
    replica_view r;
    r.replica_id = id;
    r.version = d.cfg->version;
    r.phase = sup.child(id) ? "starting" : "stopped";
    r.warm = is_warm(id);
    r.leaving = leaving.count(id) > 0;
    v.replicas.push_back(std::move(r));
  }
  return v;
}

namespace {

using stateful = caf::stateful_actor<pool_state>;

caf::timespan ms_span(int ms) { return std::chrono::milliseconds(ms); }

void announce(stateful* self) {
  auto& st = self->state;
  st.publish();
  if (st.d.node) self->send(st.d.node, st.update());
}

// After (re)starts: a new router learns the replicas and the replicas the router; a new
// replica is announced to the router.
void wire(stateful* self, const std::vector<std::string>& started) {
  auto& st = self->state;
  const caf::actor router = st.router();
  const bool new_router = std::find(started.begin(), started.end(), "router") != started.end();
  if (new_router && router) {
    replica_set set;
    for (const auto& id : st.replica_ids) {
      if (st.is_warm(id)) continue;  // held back from routing
      set.replicas.push_back(st.sup.child(id));
      set.ids.push_back(id);
    }
    self->send(router, std::move(set));
    for (const auto& id : st.replica_ids)
      if (auto r = st.sup.child(id)) self->send(r, router_is{router});
    return;
  }
  for (const auto& id : started)
    if (router && id != "router" && !st.is_warm(id)) self->send(router, replica_up{id, st.sup.child(id)});
}

supervisor_flags restart_flags(const config::pool_config& p) {
  return {restart_strategy::one_for_one, p.restart_intensity, ms_span(p.restart_period_ms)};
}

// The next replica's child spec (its id numbered on from the last), remembered in replica_ids.
child_spec replica_spec(stateful* self, caf::timespan cold_start, std::string upstream = {}) {
  auto& st = self->state;
  const config::pool_config& p = *st.d.cfg;
  replica_deps rd = replica_deps_for(p, {replica_id_of(p, st.next_replica++), p.model, p.version, st.d.region},
                                     st.runtime, st.d.gauges, st.d.loader, cold_start);
  st.replica_ids.push_back(rd.who.replica_id);
  if (!upstream.empty()) st.upstream_of[rd.who.replica_id] = upstream;
  rd.upstream = std::move(upstream);
  if (st.d.remote_replicas)
    return {rd.who.replica_id,
            [self, rd](caf::local_actor* parent) {
              return parent->system().spawn(remote_replica, rd, self->state.router(), self->state.d.registered);
            },
            restart_policy::permanent};
  return {rd.who.replica_id,
          [self, rd](caf::local_actor* parent) { return parent->system().spawn(replica, rd, self->state.router()); },
          restart_policy::permanent};
}

// The autoscaler, watched: if it dies, the pool starts another (its history starts afresh).
void start_scaler(stateful* self) {
  auto& st = self->state;
  *st.scaler = self->spawn(autoscaler, autoscaler_deps{st.d.cfg, caf::actor_cast<caf::actor>(self), st.d.gauges,
                                                      st.d.region, st.d.calendar});
  self->monitor(*st.scaler);
}

void start_children(stateful* self) {
  auto& st = self->state;
  const config::pool_config& p = *st.d.cfg;
  router_settings rs;
  rs.policy = routing_policy_from(p.routing);
  rs.model = p.model;
  rs.version = p.version;
  rs.region = st.d.region;
  rs.heartbeat = ms_span(p.heartbeat_ms);
  rs.first_token_timeout = ms_span(p.first_token_timeout_ms);
  rs.request_timeout = ms_span(p.request_timeout_ms);
  std::vector<child_spec> specs;
  specs.push_back({"router",
                   [rs, g = st.d.gauges](caf::local_actor* parent) { return parent->system().spawn(router_shard, rs, g); },
                   restart_policy::permanent});
  if (p.executor == config::executor_kind::remote)
    for (const auto& url : st.first_upstreams) specs.push_back(replica_spec(self, caf::timespan{0}, url));
  else
    for (int i = 0; i < p.replicas; ++i) specs.push_back(replica_spec(self, caf::timespan{0}));
  st.sup = supervisor(restart_flags(p), std::move(specs));
  st.sup.start_all(self);
  std::vector<std::string> all{"router"};
  wire(self, all);
  if (p.autoscale.enabled) {
    start_scaler(self);
    self->attach_functor([box = st.scaler] {
      if (*box) caf::anon_send_exit(*box, caf::exit_reason::user_shutdown);
    });
  }
}

caf::timespan cold_start_of(const config::pool_config& p) {
  return std::chrono::duration_cast<caf::timespan>(std::chrono::duration<double>(p.cold_start.total_s()));
}

// Starts one replica after the pool's cold start: announced to the router, or held warm.
void start_replica(stateful* self, bool warm) {
  auto& st = self->state;
  child_spec spec = replica_spec(self, cold_start_of(*st.d.cfg));
  const std::string id = spec.id;
  if (warm) st.warm_ids.push_back(id);
  if (warm && st.d.gauges) st.d.gauges->set_warm(id, true);
  st.sup.add(self, std::move(spec));
  if (const caf::actor router = st.router(); router && !warm) self->send(router, replica_up{id, st.sup.child(id)});
}

// A drained replica leaves: stopped, forgotten by the router and the gauges.
void remove(stateful* self, const std::string& id) {
  auto& st = self->state;
  if (std::find(st.replica_ids.begin(), st.replica_ids.end(), id) == st.replica_ids.end()) return;
  st.sup.stop(self, id);
  std::erase(st.replica_ids, id);
  st.upstream_of.erase(id);
  std::erase(st.warm_ids, id);
  st.leaving.erase(id);
  if (const caf::actor router = st.router()) self->send(router, replica_gone{id});
  if (st.d.gauges) st.d.gauges->erase_replica(id);
}

// Keeps `n` warm replicas: cold starts to fill up, the newest removed past it.
void keep_warm(stateful* self, int n) {
  auto& st = self->state;
  st.warm_target = n;
  if (st.status != pool_status::serving) return;
  while (st.warm_ids.size() < static_cast<std::size_t>(n)) start_replica(self, true);
  while (st.warm_ids.size() > static_cast<std::size_t>(n)) remove(self, st.warm_ids.back());
}

// Adds replicas the autoscaler asked for: warm ones first (those already serving before those
// still loading), then cold starts; the warm pool is refilled behind them.
void scale_up(stateful* self, int add, int warm) {
  auto& st = self->state;
  st.warm_target = warm;
  std::stable_sort(st.warm_ids.begin(), st.warm_ids.end(), [&](const std::string& a, const std::string& b) {
    auto ready = [&](const std::string& id) { return st.d.gauges && st.d.gauges->replica_phase(id) == "serving"; };
    return ready(a) && !ready(b);
  });
  while (add > 0 && !st.warm_ids.empty()) {
    const std::string id = st.warm_ids.front();
    st.warm_ids.erase(st.warm_ids.begin());
    if (st.d.gauges) st.d.gauges->set_warm(id, false);
    if (const caf::actor router = st.router()) self->send(router, replica_up{id, st.sup.child(id)});
    --add;
  }
  for (int k = 0; k < add; ++k) start_replica(self, false);
  keep_warm(self, warm);
  st.publish();
}

void on_child_down(stateful* self, const caf::down_msg& dm) {
  auto& st = self->state;
  if (*st.scaler && dm.source == st.scaler->address()) {
    *st.scaler = {};
    if (abnormal_exit(dm.reason)) {
      std::fprintf(stderr, "kiln: pool %s@%s: its autoscaler died (%s); starting another\n", st.d.cfg->model.c_str(),
                   st.d.cfg->version.c_str(), caf::to_string(dm.reason).c_str());
      start_scaler(self);
    }
    return;
  }
  const auto out = st.sup.on_down(self, dm.source, dm.reason);
  if (!out.ours) return;
  if (out.escalate) {
    const caf::timespan period = ms_span(st.d.cfg->restart_period_ms);
    std::fprintf(stderr, "kiln: pool %s@%s: restarts exceeded the intensity; degraded for %d ms\n",
                 st.d.cfg->model.c_str(), st.d.cfg->version.c_str(), st.d.cfg->restart_period_ms);
    st.status = pool_status::degraded;
    st.retry_at = self->clock().now() + period;
    self->delayed_send(self, period, recover_atom::value);
    announce(self);
    return;
  }
  wire(self, out.restarted);
  if (std::find(out.restarted.begin(), out.restarted.end(), "router") != out.restarted.end()) announce(self);
  else st.publish();
}

// The router's view with the warm replicas added (they are outside its ranking).
void add_warm(const pool_state& st, pool_view& v) {
  for (const auto& id : st.warm_ids) {
    replica_view r;
    r.replica_id = id;
    r.version = st.d.cfg->version;
    r.phase = st.d.gauges ? st.d.gauges->replica_phase(id) : "";
    if (r.phase.empty()) r.phase = "starting";
    r.warm = true;
    v.replicas.push_back(std::move(r));
  }
}

// Fans a request out to one replica, answering what it answers (or an error).
template <class Msg>
caf::result<std::string> ask_replica(stateful* self, const std::string& id, Msg msg) {
  const caf::actor r = self->state.sup.child(id);
  if (!r) return caf::make_error(caf::sec::invalid_argument, "replica " + id + " is not running");
  return pass_on<std::string>(self, r, std::move(msg), std::chrono::seconds(2));
}

// An operator's drain or resume, or the autoscaler's drain of a replica that then leaves. A
// replica on its way out (the autoscaler's, or a removed upstream's) is not resumed.
caf::result<std::string> drain_or_resume(stateful* self, const drain_replica& d) {
  auto& st = self->state;
  if (!d.resume) {
    if (d.leave && st.sup.child(d.replica_id)) st.leaving.insert(d.replica_id);
    return ask_replica(self, d.replica_id, drain_atom::value);
  }
  const bool removed_upstream = st.d.cfg->executor == config::executor_kind::remote && st.sup.child(d.replica_id) &&
                                !st.upstream_of.count(d.replica_id);
  if (st.leaving.count(d.replica_id) || removed_upstream)
    return make_error(errc::conflict, "replica " + d.replica_id + " is leaving the pool (" +
                                          (removed_upstream ? "its upstream was removed" : "its autoscaler drained it") +
                                          "); it cannot be resumed");
  return ask_replica(self, d.replica_id, undrain_atom::value);
}

// A remote pool starts from the upstreams operators left in the store, else the config's.
void start_remote(stateful* self) {
  auto& st = self->state;
  const config::pool_config& p = *st.d.cfg;
  st.first_upstreams = p.upstreams;
  auto go = [self] {
    start_children(self);
    self->state.status = pool_status::serving;
    announce(self);
  };
  const caf::actor store = caf::actor_cast<caf::actor>(self->system().registry().get(store_name));
  if (!store) return go();
  self->request(store, std::chrono::seconds(3), pool_upstreams_call{p.model, p.version, st.d.region})
      .then(
          [self, go](pool_upstreams& u) {
            if (u.stored && !u.urls.empty()) self->state.first_upstreams = std::move(u.urls);
            go();
          },
          [go](caf::error&) { go(); });
}

std::vector<std::string> current_upstreams(const pool_state& st) {
  std::vector<std::string> urls;
  for (const auto& id : st.replica_ids)
    if (auto it = st.upstream_of.find(id); it != st.upstream_of.end()) urls.push_back(it->second);
  return urls;
}

// After a change through the admin API: the list a restart starts from. `answer` is what the
// caller hears once it is stored (the change itself is in force already).
caf::result<std::vector<std::string>> save_upstreams(stateful* self, std::vector<std::string> answer) {
  auto& st = self->state;
  const caf::actor store = caf::actor_cast<caf::actor>(self->system().registry().get(store_name));
  if (!store) return answer;  // a router node apart from its control node: not kept
  const config::pool_config& p = *st.d.cfg;
  auto rp = self->make_response_promise<std::vector<std::string>>();
  self->request(store, std::chrono::seconds(3), pool_upstreams_write{p.model, p.version, st.d.region, current_upstreams(st)})
      .then([rp, answer](bool) mutable { rp.deliver(std::move(answer)); },
            [rp, name = p.model + "@" + p.version](caf::error& e) mutable {
              std::fprintf(stderr, "kiln: pool %s: its upstreams were not stored: %s\n", name.c_str(), to_string(e).c_str());
              rp.deliver(make_error(errc::internal, "The change is in force, but the store did not keep it (a restart "
                                                    "would not see it): " + to_string(e)));
            });
  return rp;
}

std::vector<std::string> upstream_lines(const pool_state& st) {
  std::vector<std::string> out;
  for (const auto& id : st.replica_ids)
    if (auto it = st.upstream_of.find(id); it != st.upstream_of.end()) out.push_back(id + " " + it->second);
  return out;
}

constexpr auto kDrainLook = std::chrono::milliseconds(200);

// A removed upstream's replica leaves once its requests have ended, or after `looks` more
// looks (an upstream that no longer answers cannot report its requests' ends).
void leave_when_drained(stateful* self, const std::string& id, int looks) {
  auto& st = self->state;
  if (!st.sup.child(id)) return remove(self, id);
  const std::string phase = st.d.gauges ? st.d.gauges->replica_phase(id) : "stopped";
  if (phase == "stopped" || phase == "failed" || looks <= 0) return remove(self, id);
  self->delayed_send(self, kDrainLook, upstream_gone_atom::value, id, looks - 1);
}

// At most the pool's request timeout, and never more than 30 s.
int drain_looks(const config::pool_config& p) {
  return static_cast<int>(std::min<std::int64_t>(p.request_timeout_ms, 30000) / kDrainLook.count());
}

caf::result<std::vector<std::string>> change_upstreams(stateful* self, const upstream_change& c) {
  auto& st = self->state;
  const config::pool_config& p = *st.d.cfg;
  if (p.executor != config::executor_kind::remote)
    return make_error(errc::invalid_request, p.model + "@" + p.version + " is not a remote pool: it has no upstreams");
  auto held = std::find_if(st.upstream_of.begin(), st.upstream_of.end(), [&](const auto& kv) { return kv.second == c.url; });
  switch (c.op) {
    case upstream_op::list: break;
    case upstream_op::add: {
      if (auto why = config::upstream_url_problem(c.url); !why.empty())
        return make_error(errc::invalid_request, "url " + why);
      if (held != st.upstream_of.end())
        return make_error(errc::conflict, "upstream " + c.url + " is already replica " + held->first);
      if (st.status != pool_status::serving)
        return make_error(errc::unavailable, "the pool is " + std::string(to_string(st.status)) + "; try again");
      child_spec spec = replica_spec(self, caf::timespan{0}, c.url);
      const std::string id = spec.id;
      st.sup.add(self, std::move(spec));
      if (const caf::actor router = st.router()) self->send(router, replica_up{id, st.sup.child(id)});
      std::fprintf(stderr, "kiln: pool %s@%s: upstream %s added as %s\n", p.model.c_str(), p.version.c_str(),
                   c.url.c_str(), id.c_str());
      break;
    }
    case upstream_op::remove: {
      if (held == st.upstream_of.end()) return make_error(errc::unknown_model, "no replica of " + p.model + "@" + p.version + " calls " + c.url);
      if (st.upstream_of.size() == 1)
        return make_error(errc::conflict, "upstream " + c.url + " is the pool's last; add another first");
      const std::string id = held->first;
      st.upstream_of.erase(held);  // no longer the pool's; its replica finishes what it holds
      if (const caf::actor r = st.sup.child(id))
        self->request(r, std::chrono::seconds(2), drain_atom::value).then([](std::string&) {}, [](caf::error&) {});
      std::fprintf(stderr, "kiln: pool %s@%s: upstream %s (%s) drains and leaves\n", p.model.c_str(), p.version.c_str(),
                   c.url.c_str(), id.c_str());
      self->delayed_send(self, kDrainLook, upstream_gone_atom::value, id, drain_looks(p));
      break;
    }
  }
  if (c.op != upstream_op::list) return save_upstreams(self, upstream_lines(st));
  return upstream_lines(st);
}

}  // namespace

caf::behavior pool_supervisor(stateful* self, pool_deps deps) {
  auto& st = self->state;
  st.d = std::move(deps);
  st.publish();
  self->set_down_handler([self](caf::down_msg& dm) { on_child_down(self, dm); });
  // With its replicas on worker nodes, the pool here only tokenizes: the weights stay on disk.
  st.d.loader->run([handle = caf::actor_cast<caf::actor>(self), cfg = st.d.cfg, remote = st.d.remote_replicas] {
    caf::anon_send(handle, detail::pool_loaded{remote ? prepare_pool_text(*cfg) : prepare_pool(*cfg)});
  });
  return {
      [self](detail::pool_loaded& m) {
        auto& st = self->state;
        st.runtime = std::move(m.runtime);
        if (!st.runtime->failure.empty()) {
          std::fprintf(stderr, "kiln: pool unavailable: %s: %s\n", st.d.cfg->model.c_str(), st.runtime->failure.c_str());
          st.status = pool_status::failed;
        } else {
          if (st.d.remote_replicas)
            std::fprintf(stderr, "kiln: pool %s@%s: tokenizer and chat template loaded; replicas on worker nodes\n",
                         st.d.cfg->model.c_str(), st.d.cfg->version.c_str());
          else if (st.runtime->cpu)
            std::fprintf(stderr, "kiln: pool %s@%s: cpu executor, %s, KV cache %s\n", st.d.cfg->model.c_str(),
                         st.d.cfg->version.c_str(), st.runtime->cpu->describe().c_str(),
                         st.runtime->cpu_kv == engine::kv_dtype::bf16 ? "bf16" : "f32");
          if (st.d.cfg->executor == config::executor_kind::remote && !st.d.remote_replicas) return start_remote(self);
          start_children(self);
          st.status = pool_status::serving;
        }
        announce(self);
      },
      [self](recover_atom) {
        auto& st = self->state;
        if (st.status != pool_status::degraded) return;
        st.status = pool_status::serving;
        wire(self, st.sup.revive(self));
        announce(self);
      },
      [self](state_atom) -> caf::result<pool_view> {
        auto& st = self->state;
        const caf::actor router = st.router();
        if (st.status != pool_status::serving || !router) return st.own_view(self->clock().now());
        auto rp = self->make_response_promise<pool_view>();
        self->request(router, std::chrono::seconds(2), state_atom::value)
            .then(
                [self, rp](pool_view& v) mutable {
                  add_warm(self->state, v);
                  for (auto& r : v.replicas) r.leaving = self->state.leaving.count(r.replica_id) > 0;
                  v.status = std::string(to_string(self->state.status));
                  v.restarts = self->state.sup.restarts();
                  rp.deliver(std::move(v));
                },
                [self, rp](caf::error&) mutable { rp.deliver(self->state.own_view(self->clock().now())); });
        return rp;
      },
      [self](drain_replica& d) { return drain_or_resume(self, d); },
      [self](scale_up_order& o) { scale_up(self, o.add, o.warm); },
      [self](warm_order& o) { keep_warm(self, o.warm); },
      [self](remove_replica& r) { remove(self, r.replica_id); },
      [self](upstream_change& c) { return change_upstreams(self, c); },
      [self](upstream_gone_atom, const std::string& id, int looks) { leave_when_drained(self, id, looks); },
      [self](serving_count& c) {
        if (c.serving == self->state.serving_replicas) return;
        self->state.serving_replicas = c.serving;
        announce(self);  // admission sizes the pool's gate by it
      },
      [self](chaos_request& c) -> caf::result<std::string> {
        auto& st = self->state;
        if (c.target == chaos_target::autoscaler) {
          if (!*st.scaler) return caf::make_error(caf::sec::invalid_argument, "the pool of " + c.id + " has no autoscaler");
          if (c.action != chaos_action::kill)
            return caf::make_error(caf::sec::invalid_argument, "an autoscaler can be killed, not " + std::string(to_string(c.action)));
          caf::anon_send_exit(*st.scaler, caf::exit_reason::kill);
          return std::string(to_string(c.action));
        }
        const caf::actor target = c.target == chaos_target::router ? st.router() : st.sup.child(c.id);
        if (!target) return caf::make_error(caf::sec::invalid_argument, "no running " + std::string(to_string(c.target)) + " " + c.id);
        c.order.action = c.action;
        if (c.target == chaos_target::engine) {
          self->send(target, engine_chaos{c.order, c.action == chaos_action::kill});
        } else if (c.action == chaos_action::kill) {
          caf::anon_send_exit(target, caf::exit_reason::kill);
        } else if (c.target == chaos_target::router && c.action != chaos_action::freeze) {
          return caf::make_error(caf::sec::invalid_argument, "a router can be killed or frozen, not " +
                                                                 std::string(to_string(c.action)));
        } else {
          self->send(target, c.order);  // a replica passes slow and fail on to its engine
        }
        return std::string(to_string(c.action));
      },
  };
}

}  // namespace kiln::actors
