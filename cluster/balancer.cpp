#include "cluster/balancer.hpp"

#include <algorithm>
#include <map>
#include <set>
#include <unordered_map>

#include <caf/all.hpp>

#include "actors/messages.hpp"
#include "actors/meter.hpp"
#include "actors/node_supervisor.hpp"
#include "actors/region_drill.hpp"
#include "cluster/wire.hpp"
#include "config/config.hpp"

namespace kiln::cluster {

namespace {

using actors::request_id;

struct flight {
  actors::request r;  ///< as the front sent it (sink: the front's)
  caf::actor target;  ///< the router node's directory it went to
  std::string region;
  std::set<std::string> tried;  ///< regions that refused it before a token
  bool tokens = false;          ///< a token of it reached the client
  engine::usage delivered;      ///< what reached the client: its prompt and output tokens
};

// Counts what an event carries toward what the client received.
void note_tokens(flight& f, const actors::stream_tokens& ev) {
  f.tokens = true;
  f.delivered.completion_tokens += ev.tokens;
  if (ev.prompt_tokens >= 0) f.delivered.prompt_tokens = ev.prompt_tokens;
  if (ev.cached_tokens >= 0) f.delivered.cached_tokens = ev.cached_tokens;
}

struct region_stats {
  std::int64_t in_flight = 0;
  std::uint64_t sent = 0, retried = 0, failed_mid_stream = 0, lost = 0;
  std::uint64_t lost_tokens = 0;  ///< output tokens clients received from requests lost with it
};

struct balancer_state {
  balancer_deps d;
  std::unordered_map<request_id, flight, actors::request_id_hash> flights;
  std::vector<member_info> routers;  ///< reachable router nodes
  std::map<std::string, region_stats> stats;
  std::size_t rr = 0;
  std::map<std::string, caf::actor_clock::time_point> drained;  ///< region -> until
  std::map<std::string, node_health> health;  ///< router node -> its pools, as last reported
  static inline const char* name = "kiln.balancer";
};

using self_ptr = caf::stateful_actor<balancer_state>*;

// Regions in preference order: the configured ones, then any other that has router nodes.
std::vector<std::string> region_order(const balancer_state& st) {
  std::vector<std::string> out = st.d.regions;
  for (const auto& m : st.routers)
    if (std::find(out.begin(), out.end(), m.region) == out.end()) out.push_back(m.region);
  return out;
}

bool draining(self_ptr self, const std::string& region) {
  auto it = self->state.drained.find(region);
  if (it == self->state.drained.end()) return false;
  if (self->clock().now() < it->second) return true;
  self->state.drained.erase(it);
  return false;
}

// A region's pools as its router nodes last reported them. A model is unhealthy in a region
// where some node has pools of it and none serves; the whole region is degraded where its
// nodes report pools and none of them serves anything. A node not heard from yet counts as
// healthy (a region is never drained on no evidence).
struct region_view {
  std::set<std::string> serving, unhealthy;
  bool reported = false;
  bool degraded() const { return reported && serving.empty() && !unhealthy.empty(); }
  bool avoid(const std::string& model) const {
    return degraded() || (unhealthy.count(model) && !serving.count(model));
  }
};

region_view view_of(const balancer_state& st, const std::string& region) {
  region_view v;
  for (const auto& m : st.routers) {
    if (m.region != region) continue;
    auto it = st.health.find(m.node);
    if (it == st.health.end()) return region_view{};  // one node unheard: no judgement yet
    v.reported = true;
    v.serving.insert(it->second.serving.begin(), it->second.serving.end());
    v.unhealthy.insert(it->second.unhealthy.begin(), it->second.unhealthy.end());
  }
  return v;
}

void publish(self_ptr self) {
  auto& st = self->state;
  std::vector<actors::region_gauge> rows;
  const auto order = region_order(st);
  for (std::size_t i = 0; i < order.size(); ++i) {
    actors::region_gauge g;
    g.region = order[i];
    g.rank = static_cast<int>(i);
    for (const auto& m : st.routers)
      if (m.region == g.region) g.nodes.push_back(m.node);
    g.up = !g.nodes.empty();
    g.draining = draining(self, g.region);
    const region_view v = view_of(st, g.region);
    g.degraded = v.degraded();
    for (const auto& m : v.unhealthy)
      if (!v.serving.count(m)) g.unhealthy_models.push_back(m);
    const auto& s = st.stats[g.region];
    g.in_flight = s.in_flight;
    g.sent = s.sent;
    g.retried = s.retried;
    g.failed_mid_stream = s.failed_mid_stream;
    g.lost = s.lost;
    g.lost_tokens = s.lost_tokens;
    rows.push_back(std::move(g));
  }
  if (st.d.gauges) st.d.gauges->set_regions(std::move(rows));
}

void end_flight(self_ptr self, const request_id& id) {
  auto it = self->state.flights.find(id);
  if (it == self->state.flights.end()) return;
  --self->state.stats[it->second.region].in_flight;
  self->state.flights.erase(it);
}

void fail(self_ptr self, flight& f, actors::errc code, std::string message, std::int32_t retry_after_s) {
  self->send(f.r.sink, actors::stream_error{f.r.id, code, std::move(message), "", retry_after_s});
}

// A request lost with its region after tokens reached the client: its region's record of it
// died with its router, so the front meters what the client received, into its own node's
// usage log (a front with no meter of its own, front-only, cannot; the tokens are counted in
// kiln_region_lost_tokens_total either way). The version is unknown here: empty.
void meter_lost(self_ptr self, const flight& f) {
  auto& st = self->state;
  st.stats[f.region].lost_tokens += f.delivered.completion_tokens;
  auto meter = caf::actor_cast<caf::actor>(self->home_system().registry().get(actors::meter_name));
  if (meter) self->send(meter, actors::usage_note{f.r.id, f.r.team, f.r.model, "", f.delivered, true});
}

// Sends the flight to the nearest region it has not been refused by, passing over regions
// whose pools for its model are unhealthy while a healthy one is left (with none left, the
// nearest takes it and answers for its pool); false: none can take it (the flight is then
// ended with an error).
bool dispatch(self_ptr self, flight& f) {
  auto& st = self->state;
  const std::string model = config::split_model_ref(f.r.model).first;
  for (const bool healthy_only : {true, false}) {
    for (const auto& region : region_order(st)) {
      if (f.tried.count(region) || draining(self, region)) continue;
      if (healthy_only && view_of(st, region).avoid(model)) continue;
      std::vector<const member_info*> nodes;
      for (const auto& m : st.routers)
        if (m.region == region) nodes.push_back(&m);
      if (nodes.empty()) continue;
      const member_info& to = *nodes[st.rr++ % nodes.size()];
      f.target = to.directory;
      f.region = region;
      auto r = f.r;
      r.sink = caf::actor_cast<caf::actor>(self);
      self->send(to.directory, std::move(r));
      ++st.stats[region].in_flight;
      ++st.stats[region].sent;
      return true;
    }
  }
  fail(self, f, actors::errc::unavailable, "No region can take the request now.", 1);
  return false;
}

// Each router node reports its pools (every publish period); a report that changes a region's
// view shows at the next publish.
void ask_health(self_ptr self) {
  for (const auto& m : self->state.routers) {
    self->request(m.directory, self->state.d.publish_every * 2, health_atom::value)
        .then(
            [self, node = m.node](node_health& h) {
              // A node that left meanwhile is not brought back by its late answer.
              for (const auto& r : self->state.routers)
                if (r.node == node) self->state.health[node] = std::move(h);
            },
            [](caf::error&) {});  // a lost node leaves through membership, not here
  }
}

// The reachable router nodes changed: requests on a node that left move or end; a region
// left with no router node counts as lost once.
void on_members(self_ptr self, const std::vector<member_info>& all) {
  auto& st = self->state;
  std::set<std::string> before, after;
  for (const auto& m : st.routers) before.insert(m.region);
  std::vector<member_info> routers;
  for (const auto& m : all)
    if ((m.roles & config::role_bit(config::node_role::router)) && m.directory) routers.push_back(m);
  std::set<caf::actor_addr> alive;
  for (const auto& m : routers) alive.insert(m.directory.address());
  st.routers = std::move(routers);
  for (const auto& m : st.routers) after.insert(m.region);
  std::erase_if(st.health, [&](const auto& h) {
    return std::none_of(st.routers.begin(), st.routers.end(), [&](const member_info& m) { return m.node == h.first; });
  });
  for (const auto& region : before)
    if (!after.count(region)) ++st.stats[region].lost;
  std::vector<request_id> orphaned;
  for (auto& [id, f] : st.flights)
    if (f.target && !alive.count(f.target.address())) orphaned.push_back(id);
  for (const auto& id : orphaned) {
    auto& f = st.flights.at(id);
    auto& from = st.stats[f.region];
    --from.in_flight;
    if (f.tokens) {
      ++from.failed_mid_stream;
      meter_lost(self, f);
      fail(self, f, actors::errc::replica_lost,
           "Region " + f.region + " was lost after the response had started; retry the request.", 0);
      st.flights.erase(id);
      continue;
    }
    ++from.retried;
    if (!dispatch(self, f)) st.flights.erase(id);
  }
  publish(self);
}

bool refused_here(actors::errc code) {
  return code == actors::errc::shutting_down || code == actors::errc::degraded || code == actors::errc::unavailable;
}

caf::behavior balancer(self_ptr self, balancer_deps deps) {
  self->state.d = std::move(deps);
  self->request(self->state.d.directory, caf::infinite, watch_atom::value)
      .then([self](std::vector<member_info>& all) { on_members(self, all); });
  self->send(self, actors::tick_atom::value);
  return {
      [self](actors::request& r) {
        flight f;
        f.r = std::move(r);
        auto [it, fresh] = self->state.flights.emplace(f.r.id, std::move(f));
        if (!fresh) return;  // the front never sends one id twice
        if (!dispatch(self, it->second)) self->state.flights.erase(it);
      },
      [self](members_atom, std::vector<member_info>& all) { on_members(self, all); },
      [self](actors::stream_tokens& ev) {
        auto it = self->state.flights.find(ev.id);
        if (it == self->state.flights.end()) return;
        note_tokens(it->second, ev);
        self->send(it->second.r.sink, std::move(ev));
      },
      [self](actors::stream_batch& b) {
        // Every request of a front shares its sink: one batch out, unless sinks differ.
        caf::actor sink;
        bool one_sink = true;
        std::vector<actors::stream_tokens> known;
        known.reserve(b.items.size());
        for (auto& ev : b.items) {
          auto it = self->state.flights.find(ev.id);
          if (it == self->state.flights.end()) continue;
          note_tokens(it->second, ev);
          if (!sink) sink = it->second.r.sink;
          one_sink = one_sink && sink == it->second.r.sink;
          if (one_sink) known.push_back(std::move(ev));
          else self->send(it->second.r.sink, std::move(ev));
        }
        if (sink && !known.empty()) self->send(sink, actors::stream_batch{std::move(known)});
      },
      [self](actors::rate_limit_info& ev) {
        auto it = self->state.flights.find(ev.id);
        if (it != self->state.flights.end()) self->send(it->second.r.sink, ev);
      },
      [self](actors::stream_end& ev) {
        auto it = self->state.flights.find(ev.id);
        if (it == self->state.flights.end()) return;
        self->send(it->second.r.sink, ev);
        end_flight(self, ev.id);
      },
      [self](actors::stream_error& ev) {
        auto it = self->state.flights.find(ev.id);
        if (it == self->state.flights.end()) return;
        flight& f = it->second;
        const bool elsewhere = [&] {
          for (const auto& m : self->state.routers)
            if (m.region != f.region && !f.tried.count(m.region)) return true;
          return false;
        }();
        if (!f.tokens && refused_here(ev.code) && elsewhere) {
          auto& from = self->state.stats[f.region];
          --from.in_flight;
          ++from.retried;
          f.tried.insert(f.region);
          if (!dispatch(self, f)) self->state.flights.erase(it);
          return;
        }
        self->send(f.r.sink, ev);
        end_flight(self, ev.id);
      },
      [self](actors::region_drill& d) -> caf::result<actors::region_drill_report> {
        auto& st = self->state;
        actors::region_drill_report report{d.region, d.action, {}};
        for (const auto& m : st.routers)
          if (m.region == d.region) report.nodes.push_back(m.node);
        const auto order = region_order(st);
        if (std::find(order.begin(), order.end(), d.region) == order.end())
          return actors::make_error(actors::errc::invalid_request, "No region named " + d.region + ".");
        if (d.action == "drain") {
          st.drained[d.region] = d.seconds > 0
                                     ? self->clock().now() + std::chrono::duration_cast<caf::timespan>(
                                                                 std::chrono::duration<double>(d.seconds))
                                     : caf::actor_clock::time_point::max();
        } else if (d.action == "undrain") {
          st.drained.erase(d.region);
        } else if (d.action == "kill") {
          if (report.nodes.empty())
            return actors::make_error(actors::errc::unavailable, "No router node of region " + d.region + " is reachable.");
          for (const auto& m : st.routers)
            if (m.region == d.region) self->send(m.directory, die_atom::value);
        } else {
          return actors::make_error(actors::errc::invalid_request, "A region drill is drain, undrain or kill.");
        }
        publish(self);
        return report;
      },
      [self](actors::cluster_config_ask) -> std::vector<actors::node_config_row> {
        std::vector<actors::node_config_row> rows;
        for (const auto& m : self->state.routers) {
          auto it = self->state.health.find(m.node);
          if (it != self->state.health.end())
            rows.push_back({m.node, m.region, it->second.config_source, it->second.config_version});
        }
        return rows;
      },
      [self](actors::tick_atom) {
        ask_health(self);
        publish(self);
        self->delayed_send(self, self->state.d.publish_every, actors::tick_atom::value);
      },
  };
}

}  // namespace

caf::actor spawn_balancer(caf::actor_system& sys, balancer_deps deps) {
  auto b = sys.spawn(balancer, std::move(deps));
  sys.registry().put(actors::balancer_name, b);
  return b;
}

}  // namespace kiln::cluster
