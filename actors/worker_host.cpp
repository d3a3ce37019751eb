#include "actors/worker_host.hpp"

#include <cstdio>
#include <variant>

#include <caf/all.hpp>

#include "actors/replica.hpp"

namespace kiln::actors::detail {
struct host_loaded {
  std::string key;
  std::shared_ptr<const pool_runtime> runtime;
};
}  // namespace kiln::actors::detail

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kiln::actors::detail::host_loaded)

namespace kiln::actors {

namespace {

using stateful = caf::stateful_actor<worker_host_state>;

std::string key_of(const std::string& model, const std::string& version) { return model + "@" + version; }

void load(stateful* self, const config::pool_config& p) {
  auto& st = self->state;
  const std::string key = key_of(p.model, p.version);
  if (st.runtimes.count(key)) return;
  st.runtimes[key] = nullptr;
  st.d.loader->run([h = caf::actor_cast<caf::actor>(self), key, p] {
    caf::anon_send(h, detail::host_loaded{key, prepare_pool(p)});
  });
}

// The replica for the ask, started now unless it already runs here.
caf::expected<caf::actor> start(stateful* self, const host_replica& h, const config::pool_config& p) {
  auto& st = self->state;
  if (auto it = st.hosted.find(h.replica_id); it != st.hosted.end()) return it->second;
  const auto& rt = st.runtimes.at(key_of(h.model, h.version));
  if (!rt->failure.empty()) return caf::make_error(caf::sec::runtime_error, "pool " + key_of(h.model, h.version) + ": " + rt->failure);
  const replica_deps rd = replica_deps_for(p, {h.replica_id, h.model, h.version, h.region}, rt, st.d.gauges, st.d.loader,
                                           std::chrono::milliseconds(h.cold_start_ms));
  // Linked: the host's end (the node stopping) ends its replicas; their ends are down messages.
  auto r = self->spawn<caf::linked>(replica, rd, h.router);
  self->monitor(r);
  st.hosted[h.replica_id] = r;
  std::fprintf(stderr, "kiln: worker: hosting replica %s\n", h.replica_id.c_str());
  return r;
}

// The pool an ask is for: the worker's own, or one derived from a registration; an error line
// when neither can be had.
std::variant<const config::pool_config*, std::string> pool_of(stateful* self, const host_replica& h) {
  auto& st = self->state;
  const std::string key = key_of(h.model, h.version);
  if (auto it = st.registered.find(key); it != st.registered.end()) return it->second.get();
  if (const auto* p = st.d.cfg->pool_for(h.model, h.version)) return p;
  if (h.registered.empty()) return "this worker node has no pool " + key + " in its config";
  const config::pool_config* base = st.d.cfg->pool_for(h.model, st.d.cfg->live_version(h.model));
  for (const auto& p : st.d.cfg->pools)
    if (!base && p.model == h.model) base = &p;
  if (!base) return "this worker node has no pool of model " + h.model + " to take version " + h.version + " from";
  auto made = std::make_shared<const config::pool_config>(config::version_pool(*base, h.registered.front(), st.d.cfg->artifacts));
  st.registered[key] = made;
  return made.get();
}

}  // namespace

caf::behavior worker_host(stateful* self, worker_host_deps deps) {
  auto& st = self->state;
  st.d = std::move(deps);
  for (const auto& p : st.d.cfg->pools) load(self, p);
  self->set_exit_handler([self](caf::exit_msg& m) {
    for (const auto& [id, r] : self->state.hosted)
      if (r.address() == m.source) return;  // a replica's end: its down message follows
    self->quit(m.reason);
  });
  self->set_down_handler([self](caf::down_msg& dm) {
    auto& hosted = self->state.hosted;
    for (auto it = hosted.begin(); it != hosted.end(); ++it)
      if (it->second.address() == dm.source) {
        if (self->state.d.gauges) self->state.d.gauges->erase_replica(it->first);
        hosted.erase(it);
        return;
      }
  });
  return {
      [self](host_replica& h) -> caf::result<caf::actor> {
        auto& st = self->state;
        auto found = pool_of(self, h);
        if (auto* e = std::get_if<std::string>(&found)) return caf::make_error(caf::sec::invalid_argument, *e);
        const config::pool_config* p = std::get<const config::pool_config*>(found);
        const std::string key = key_of(h.model, h.version);
        if (auto f = st.failed_at.find(key); f != st.failed_at.end() && self->clock().now() - f->second >= kPrepareRetry) {
          st.failed_at.erase(f);
          st.runtimes.erase(key);  // prepared afresh below
        }
        load(self, *p);
        if (st.runtimes[key]) return start(self, h, *p);
        auto rp = self->make_response_promise<caf::actor>();
        st.waiting[key].emplace_back(std::move(h), rp);
        return rp;
      },
      [self](detail::host_loaded& m) {
        auto& st = self->state;
        st.runtimes[m.key] = m.runtime;
        if (!m.runtime->failure.empty()) {
          std::fprintf(stderr, "kiln: worker: pool %s cannot serve: %s\n", m.key.c_str(), m.runtime->failure.c_str());
          st.failed_at[m.key] = self->clock().now();
        }
        auto asks = std::move(st.waiting[m.key]);
        st.waiting.erase(m.key);
        for (auto& [h, rp] : asks) {
          const config::pool_config* p = std::get<const config::pool_config*>(pool_of(self, h));
          auto r = start(self, h, *p);
          if (r) rp.deliver(*r);
          else rp.deliver(r.error());
        }
      },
      [self](unhost_replica& u) {
        auto& hosted = self->state.hosted;
        auto it = hosted.find(u.replica_id);
        if (it == hosted.end()) return;
        self->unlink_from(it->second);
        caf::anon_send_exit(it->second, caf::exit_reason::user_shutdown);
      },
  };
}

}  // namespace kiln::actors
