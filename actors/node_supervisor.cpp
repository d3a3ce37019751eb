#include "actors/node_supervisor.hpp"

#include <algorithm>
#include <cstdio>

#include <caf/all.hpp>

#include "actors/admission.hpp"
#include "actors/ask.hpp"
#include "actors/store_writer.hpp"

namespace kiln::actors {

namespace {

using stateful = caf::stateful_actor<node_state>;

const config::pool_config* pool_of_replica(const node_state& st, const std::string& replica_id) {
  for (const auto* p : st.all_pools())
    for (int i = 0; i < p->replicas; ++i)
      if (replica_id_of(*p, i) == replica_id) return p;
  return nullptr;
}

const config::pool_config* pool_named(const node_state& st, const std::string& key) {
  for (const auto* p : st.all_pools())
    if (p->model + "@" + p->version == key) return p;
  return nullptr;
}

// Names a (re)started child in the registry. CAF's put keeps an existing entry, so the dead
// actor a restart replaces would stay named without the erase.
void name_actor(caf::actor_system& sys, caf::atom_value name, const caf::actor& a) {
  sys.registry().erase(name);
  sys.registry().put(name, caf::actor_cast<caf::strong_actor_ptr>(a));
}

// Resolves "random" among the pools that serve now.
std::string pick_target(stateful* self, chaos_target t) {
  auto& st = self->state;
  std::vector<std::string> ids;
  for (const auto* p : st.all_pools()) {
    auto it = st.pools.find(p->model + "@" + p->version);
    if (it == st.pools.end() || it->second.status != pool_status::serving) continue;
    if (t == chaos_target::router || t == chaos_target::autoscaler) {
      ids.push_back(p->model + "@" + p->version);
      continue;
    }
    for (int i = 0; i < p->replicas; ++i) ids.push_back(replica_id_of(*p, i));
  }
  if (ids.empty()) return {};
  return ids[std::uniform_int_distribution<std::size_t>(0, ids.size() - 1)(st.rng)];
}

// The store writer killed: its supervisor (the node) starts another, which opens the same store.
caf::result<chaos_report> kill_store(stateful* self, const chaos_request& c) {
  const caf::actor store = self->state.sup.child("store");
  if (!store) return caf::make_error(caf::sec::invalid_argument, "this node runs no store writer");
  if (c.action != chaos_action::kill)
    return caf::make_error(caf::sec::invalid_argument, "the store writer can be killed, not " + std::string(to_string(c.action)));
  caf::anon_send_exit(store, caf::exit_reason::kill);
  return chaos_report{"store", "store", "", "", "kill"};
}

caf::result<chaos_report> on_chaos(stateful* self, chaos_request& c) {
  auto& st = self->state;
  if (c.target == chaos_target::store) return kill_store(self, c);
  if (c.id == "random") c.id = pick_target(self, c.target);
  const bool by_pool = c.target == chaos_target::router || c.target == chaos_target::autoscaler;
  const config::pool_config* p = by_pool ? pool_named(st, c.id) : pool_of_replica(st, c.id);
  if (!p)
    return caf::make_error(caf::sec::invalid_argument,
                           c.id.empty() ? "no pool is serving" : "no " + std::string(to_string(c.target)) + " named " + c.id);
  const caf::actor pool = st.sup.child(node_state::pool_child(*p));
  if (!pool) return caf::make_error(caf::sec::invalid_argument, "the pool of " + c.id + " is not running");
  chaos_report report{std::string(to_string(c.target)), c.id, p->model, p->version, std::string(to_string(c.action))};
  auto rp = self->make_response_promise<chaos_report>();
  self->request(pool, std::chrono::seconds(2), c)
      .then([rp, report](std::string&) mutable { rp.deliver(report); },
            [rp](caf::error& e) mutable { rp.deliver(std::move(e)); });
  return rp;
}

caf::result<std::vector<pool_view>> on_pool_state(stateful* self, const std::string& model) {
  auto& st = self->state;
  std::vector<caf::actor> pools;
  for (const auto* p : st.all_pools())
    if (p->model == model)
      if (auto a = st.sup.child(node_state::pool_child(*p))) pools.push_back(a);
  if (pools.empty()) return caf::make_error(caf::sec::invalid_argument, "The model '" + model + "' does not exist.");
  struct gather {
    std::vector<pool_view> views;
    std::size_t left = 0;
  };
  auto g = std::make_shared<gather>();
  g->left = pools.size();
  auto rp = self->make_response_promise<std::vector<pool_view>>();
  auto one_done = [g, rp]() mutable {
    if (--g->left > 0) return;
    std::sort(g->views.begin(), g->views.end(), [](const pool_view& a, const pool_view& b) { return a.version < b.version; });
    rp.deliver(std::move(g->views));
  };
  for (const auto& pool : pools) {
    self->request(pool, std::chrono::seconds(3), state_atom::value)
        .then([g, one_done](pool_view& v) mutable {
                g->views.push_back(std::move(v));
                one_done();
              },
              [one_done](caf::error&) mutable { one_done(); });
  }
  return rp;
}

}  // namespace

caf::behavior node_supervisor(stateful* self, node_deps deps) {
  auto& st = self->state;
  st.d = std::move(deps);
  st.rng.seed(st.d.chaos_seed);
  const auto cfg = st.d.cfg;
  std::vector<child_spec> specs;
  if (st.d.serves) specs.push_back({"admission",
                   [cfg, self](caf::local_actor* parent) {
                     auto a = parent->system().spawn(admission, cfg, self->state.d.tenants, self->state.d.gauges,
                                                     self->state.d.capture);
                     name_actor(parent->system(), admission_name, a);
                     return a;
                   },
                   restart_policy::permanent});
  if (st.d.store) {
    specs.push_back({"store",
                     [db = st.d.store, board = st.d.board, registry = st.d.registry](caf::local_actor* parent) {
                       auto a = parent->system().spawn(store_writer, db, board, caf::actor_cast<caf::actor>(parent),
                                                       registry);
                       name_actor(parent->system(), store_name, a);
                       return a;
                     },
                     restart_policy::permanent});
  }
  if (st.d.serves && !st.d.meter.wal_prefix.empty()) {
    specs.push_back({"meter",
                     [md = st.d.meter](caf::local_actor* parent) {
                       auto a = parent->system().spawn(meter, md);
                       name_actor(parent->system(), meter_name, a);
                       return a;
                     },
                     restart_policy::permanent});
  }
  if (st.d.serves) {
    for (const auto& p : cfg->pools) specs.push_back(pool_child_spec(self, std::make_shared<const config::pool_config>(p)));
    for (auto& c : rollout_child_specs(self)) specs.push_back(std::move(c));
  }
  st.sup = supervisor({restart_strategy::one_for_one, 10, std::chrono::seconds(60)}, std::move(specs));
  self->system().registry().put(node_name, caf::actor_cast<caf::strong_actor_ptr>(self));
  st.sup.start_all(self);
  self->set_down_handler([self](caf::down_msg& dm) {
    auto& st = self->state;
    const auto out = st.sup.on_down(self, dm.source, dm.reason);
    if (!out.ours) return;
    if (out.escalate) {
      std::fprintf(stderr, "kiln: node supervisor: restarts exceeded the intensity; stopping\n");
      self->quit(caf::make_error(caf::sec::runtime_error, "node restart intensity exceeded"));
      return;
    }
    for (const auto& id : out.restarted) {
      std::fprintf(stderr, "kiln: node supervisor: %s stopped (%s); restarted\n", id.c_str(),
                   self->system().render(dm.reason).c_str());
      if (id != "admission") continue;
      for (const auto& [key, u] : st.pools) self->send(st.admission(), u);
      for (const auto& [model, r] : st.routes) self->send(st.admission(), r);
    }
  });
  caf::message_handler calls{
      [self](pool_update& u) {
        auto& st = self->state;
        st.pools[u.model + "@" + u.version] = u;
        if (auto a = st.admission()) self->send(a, std::move(u));
      },
      [self](tenancy_update& u) {
        self->state.d.tenants = u.tenants;  // a restarted admission starts from the latest
        if (auto a = self->state.admission()) self->send(a, std::move(u));
      },
      [self](pool_state_request& r) { return on_pool_state(self, r.model); },
      [self](drain_replica& d) -> caf::result<std::string> {
        auto& st = self->state;
        const config::pool_config* p = pool_of_replica(st, d.replica_id);
        const caf::actor pool = p ? st.sup.child(node_state::pool_child(*p)) : caf::actor{};
        if (!pool) return caf::make_error(caf::sec::invalid_argument, "no replica named " + d.replica_id);
        return pass_on<std::string>(self, pool, d, std::chrono::seconds(3));
      },
      [self](chaos_request& c) { return on_chaos(self, c); },
      [self](upstream_change& c) -> caf::result<std::vector<std::string>> {
        if (const caf::actor pool = self->state.sup.child(node_state::pool_child(c.model, c.version)))
          return pass_on<std::vector<std::string>>(self, pool, c, std::chrono::seconds(3));
        return make_error(errc::unknown_model, "no pool " + c.model + "@" + c.version + " runs on this node");
      },
  };
  return caf::behavior{calls.or_else(node_version_calls(self))};
}

caf::actor spawn_node(caf::actor_system& sys, node_deps deps) { return sys.spawn(node_supervisor, std::move(deps)); }

void stop_node(const caf::actor& node) {
  if (node) caf::anon_send_exit(node, caf::exit_reason::user_shutdown);
}

}  // namespace kiln::actors
