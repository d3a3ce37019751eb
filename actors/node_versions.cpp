// The node's side of rollouts: pools for registered versions started and retired at run
// time, one rollout controller per model, and the routes the controllers set, which the
// node hands to admission (again to a restarted one).
#include <algorithm>
#include <set>

#include <caf/all.hpp>

#include "actors/node_supervisor.hpp"
#include "actors/router_shard.hpp"

namespace kiln::actors {

namespace {

using stateful = caf::stateful_actor<node_state>;
using retry_retire_atom = caf::atom_constant<caf::atom("reretire")>;

std::string status_name(const node_state& st, const std::string& model, const std::string& version) {
  auto it = st.pools.find(model + "@" + version);
  if (it == st.pools.end()) return "loading";
  return std::string(to_string(it->second.status));
}

void retire(stateful* self, const retire_pool& r) {
  auto& st = self->state;
  const caf::actor pool = st.sup.child(node_state::pool_child(r.model, r.version));
  if (!pool) return;
  // Drained first: stopped only once no request runs on it; asked again every 5 s.
  self->request(pool, std::chrono::seconds(3), state_atom::value)
      .then(
          [self, r](pool_view& v) {
            if (v.active_requests > 0) {
              self->delayed_send(self, std::chrono::seconds(5), retry_retire_atom::value, r.model, r.version);
              return;
            }
            auto& st = self->state;
            st.sup.stop(self, node_state::pool_child(r.model, r.version));
            pool_update gone;
            gone.model = r.model;
            gone.version = r.version;
            gone.status = pool_status::failed;
            gone.failure = "version " + r.version + " is retired";
            st.pools[r.model + "@" + r.version] = gone;
            if (auto a = st.admission()) self->send(a, gone);
          },
          [self, r](caf::error&) {
            self->delayed_send(self, std::chrono::seconds(5), retry_retire_atom::value, r.model, r.version);
          });
}

template <class Order>
caf::result<rollout_view> to_controller(stateful* self, const std::string& model, Order o) {
  const caf::actor c = self->state.sup.child("rollout:" + model);
  if (!c) return make_error(errc::unknown_model, "The model '" + model + "' does not exist.");
  auto rp = self->make_response_promise<rollout_view>();
  self->request(c, std::chrono::seconds(60), std::move(o))
      .then([rp](rollout_view& v) mutable { rp.deliver(std::move(v)); },
            [rp](caf::error& e) mutable { rp.deliver(std::move(e)); });
  return rp;
}

}  // namespace

std::vector<const config::pool_config*> node_state::all_pools() const {
  std::vector<const config::pool_config*> out;
  for (const auto& p : d.cfg->pools) out.push_back(&p);
  for (const auto& p : added) out.push_back(p.get());
  return out;
}

child_spec pool_child_spec(stateful* self, std::shared_ptr<const config::pool_config> p,
                           std::vector<config::model_version> registered) {
  auto& st = self->state;
  pool_deps pd;
  pd.cfg = p;
  pd.region = st.d.cfg->region;
  pd.gauges = st.d.gauges;
  pd.loader = st.d.loader;
  pd.calendar = st.d.calendar;
  // A remote pool's replicas only call their upstreams: they run here, on the router's node.
  pd.remote_replicas = !st.d.cfg->cluster.has(config::node_role::worker) && p->executor != config::executor_kind::remote;
  pd.registered = std::move(registered);
  return {node_state::pool_child(*p),
          [pd](caf::local_actor* parent) mutable {
            pd.node = caf::actor_cast<caf::actor>(parent);
            return parent->system().spawn(pool_supervisor, pd);
          },
          restart_policy::permanent};
}

std::optional<config::pool_config> pool_for_version(const node_state& st, const config::model_version& v) {
  const config::pool_config* base = st.d.cfg->pool_for(v.model, st.d.cfg->live_version(v.model));
  for (const auto* p : st.all_pools())
    if (!base && p->model == v.model) base = p;
  if (!base) return std::nullopt;
  return config::version_pool(*base, v, st.d.cfg->artifacts);
}

std::vector<child_spec> rollout_child_specs(stateful* self) {
  auto& st = self->state;
  std::set<std::string> models;
  for (const auto& m : st.d.cfg->models) models.insert(m.name);
  for (const auto& p : st.d.cfg->pools) models.insert(p.model);
  std::vector<child_spec> out;
  for (const auto& model : models) {
    rollout_deps rd;
    rd.model = model;
    rd.route.model = model;
    rd.route.live = st.d.cfg->live_version(model);
    for (const auto& [r, left] : st.d.routes)
      if (r.model == model) {
        rd.route = r;
        rd.previous_left_s = left;
      }
    rd.limits = st.d.cfg->rollout;
    rd.gauges = st.d.gauges;
    for (const auto& v : st.d.registered)
      if (v.model == model) rd.registered.push_back(v);
    for (const auto& p : st.d.cfg->pools)
      if (p.model == model) {
        config::model_version v;
        v.model = model;
        v.version = p.version;
        v.status = "live";
        rd.known.push_back(v);
      }
    out.push_back({"rollout:" + model,
                   [rd, self](caf::local_actor* parent) mutable {
                     rd.node = caf::actor_cast<caf::actor>(parent);
                     rd.stored = self->state.d.store != nullptr || self->state.d.store_elsewhere;
                     return parent->system().spawn(rollout_controller, rd);
                   },
                   restart_policy::permanent});
  }
  return out;
}

caf::message_handler node_version_calls(stateful* self) {
  return {
      [self](route_update& u) {
        auto& st = self->state;
        st.routes[u.route.model] = u;
        if (auto a = st.admission()) self->send(a, std::move(u));
      },
      [self](ensure_pool& e) -> caf::result<std::string> {
        auto& st = self->state;
        const config::model_version& v = e.version;
        const std::string id = node_state::pool_child(v.model, v.version);
        bool known = false;
        for (const auto* p : st.all_pools()) known = known || (p->model == v.model && p->version == v.version);
        if (!known) {
          auto cfg = pool_for_version(st, v);
          if (!cfg) return make_error(errc::unknown_model, "The model '" + v.model + "' has no pool to take a version from.");
          auto p = std::make_shared<const config::pool_config>(std::move(*cfg));
          st.added.push_back(p);
          st.sup.add(self, pool_child_spec(self, p, {v}));
          return std::string("loading");
        }
        if (!st.sup.child(id)) {
          st.sup.start(self, id);  // a retired version brought back
          return std::string("loading");
        }
        return status_name(st, v.model, v.version);
      },
      [self](pool_phase& p) -> std::string { return status_name(self->state, p.model, p.version); },
      [self](retire_pool& r) { retire(self, r); },
      [self](retry_retire_atom, std::string& model, std::string& version) { retire(self, retire_pool{model, version}); },
      [self](rollout_order& o) { return to_controller(self, o.model, o); },
      [self](alias_order& o) { return to_controller(self, o.model, o); },
      [self](rollout_query& q) { return to_controller(self, q.model, q); },
  };
}

}  // namespace kiln::actors
