#include "cluster/directory.hpp"

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <functional>
#include <map>
#include <set>

#include <caf/all.hpp>
#include <caf/io/middleman.hpp>
#include <caf/io/middleman_actor.hpp>

#include "actors/loader.hpp"
#include "actors/admission.hpp"
#include "actors/ask.hpp"
#include "actors/messages.hpp"
#include "actors/node_supervisor.hpp"
#include "actors/worker_host.hpp"
#include "config/snapshot.hpp"

namespace kiln::cluster {

namespace {

struct directory_state {
  directory_deps d;
  caf::io::middleman_actor mm;
  std::map<std::string, member_info> members;  ///< by node name, this node included
  std::set<std::string> dial;                  ///< endpoints to reach: seeds and what members told
  std::set<std::string> pending;               ///< dials under way
  std::set<std::string> seeds_tried;           ///< seeds whose first dial has ended (joined or failed)
  std::vector<caf::actor> watchers;
  // Configuration snapshots.
  std::shared_ptr<const config::tenancy> published_from;  ///< control: the board as last looked at
  std::shared_ptr<const config::registry_view> published_registry;
  std::string bytes;         ///< control: the current snapshot, encoded
  std::uint64_t version = 0; ///< the snapshot served from (made or taken)
  std::shared_ptr<actors::loader> disk;  ///< writes the last-known-good file (blocking I/O)
  static inline const char* name = "kiln.directory";
};

using self_ptr = caf::stateful_actor<directory_state>*;

std::vector<member_info> membership(const directory_state& st) {
  std::vector<member_info> out;
  for (const auto& [name, m] : st.members) out.push_back(m);
  return out;
}

void publish(self_ptr self) {
  auto all = membership(self->state);
  for (const auto& w : self->state.watchers) self->send(w, members_atom::value, all);
}

bool connected_to(const directory_state& st, const std::string& endpoint) {
  for (const auto& [name, m] : st.members)
    if (m.endpoint == endpoint) return true;
  return false;
}

void learn(self_ptr self, const std::vector<member_info>& told);

bool has_role(const member_info& m, config::node_role r) { return (m.roles & config::role_bit(r)) != 0; }
bool control_here(const directory_state& st) { return has_role(st.d.self, config::node_role::control); }

// The worker node of this node's region that hosts a replica: highest rendezvous weight of
// (replica, node), so a replica started again goes back to the same worker while it lives and
// replicas spread over the workers.
caf::actor worker_for(const directory_state& st, const std::string& replica_id) {
  const member_info* best = nullptr;
  std::uint64_t best_w = 0;
  for (const auto& [name, m] : st.members) {
    if (!has_role(m, config::node_role::worker) || m.region != st.d.self.region || !m.directory) continue;
    const std::string key = replica_id + "/" + name;
    const std::uint64_t w = std::hash<std::string>{}(key) * 0x9E3779B97F4A7C15ull;
    if (!best || w > best_w) best = &m, best_w = w;
  }
  return best ? best->directory : caf::actor{};
}

// The control node this node follows: the one of the nearest region (then by name).
const member_info* followed_control(const directory_state& st) {
  const member_info* best = nullptr;
  std::size_t best_rank = 0;
  for (const auto& [name, m] : st.members) {
    if (!has_role(m, config::node_role::control) || name == st.d.self.node) continue;
    const auto it = std::find(st.d.regions.begin(), st.d.regions.end(), m.region);
    const std::size_t rank = static_cast<std::size_t>(it - st.d.regions.begin());
    if (!best || rank < best_rank) best = &m, best_rank = rank;
  }
  return best;
}

void note_config(directory_state& st, const std::function<void(actors::config_state&)>& change) {
  if (!st.d.gauges) return;
  auto c = st.d.gauges->config();
  change(c);
  st.d.gauges->set_config_state(std::move(c));
}

// A control node: a new snapshot when its board changed, pushed to every other node.
void publish_config(self_ptr self) {
  auto& st = self->state;
  if (!st.d.board) return;
  auto current = st.d.board->get();
  auto registry = st.d.registry ? st.d.registry->get() : nullptr;
  if (current == st.published_from && registry == st.published_registry) return;
  st.published_from = current;
  st.published_registry = registry;
  config::config_snapshot snap;
  snap.tenants = *current;
  if (registry) {
    snap.routes = registry->routes;
    snap.versions = registry->versions;
  }
  snap.origin = st.d.self.node;
  snap.made_unix = st.d.unix_at_start +
                   std::chrono::duration_cast<std::chrono::seconds>(self->clock().now() - st.d.clock_at_start).count();
  snap.version = config::content_version(snap);
  if (snap.version == st.version) return;
  st.version = snap.version;
  st.bytes = config::encode_snapshot(snap);
  note_config(st, [&](actors::config_state& c) {
    c.source = "store";
    c.version = config::version_text(snap.version);
    c.origin = snap.origin;
    c.made_unix = snap.made_unix;
  });
  for (const auto& [name, m] : st.members)
    if (!has_role(m, config::node_role::control)) self->send(m.directory, snapshot_atom::value, st.bytes);
}

// Another node: a snapshot from the control node it follows replaces its configuration and
// its last-known-good file; one it cannot read changes nothing.
void take_config(self_ptr self, const caf::actor_addr& from, const std::string& bytes) {
  auto& st = self->state;
  const member_info* followed = followed_control(st);
  if (control_here(st) || bytes.empty() || !followed || followed->directory.address() != from) return;
  auto decoded = config::decode_snapshot(bytes);
  if (auto* e = std::get_if<std::string>(&decoded)) {
    const std::string why = "snapshot from " + followed->node + " refused: " + *e;
    note_config(st, [&](actors::config_state& c) {
      c.last_error = why;
      ++c.refused;
    });
    return;
  }
  auto& snap = std::get<config::config_snapshot>(decoded);
  if (snap.version == st.version) return;
  st.version = snap.version;
  if (st.d.board) {
    st.d.board->set(snap.tenants);
    // A router node's admission serves from it too (through the node, which hands it to a
    // restarted admission).
    if (auto node = caf::actor_cast<caf::actor>(self->home_system().registry().get(actors::node_name)))
      self->send(node, actors::tenancy_update{st.d.board->get()});
  }
  note_config(st, [&](actors::config_state& c) {
    c.source = "control";
    c.version = config::version_text(snap.version);
    c.origin = snap.origin;
    c.made_unix = snap.made_unix;
    ++c.received;
  });
  if (!st.d.snapshot_path.empty())
    st.disk->run([path = st.d.snapshot_path, snap = std::move(snap), gauges = st.d.gauges] {
      if (auto e = config::save_snapshot(path, snap)) {
        std::fprintf(stderr, "kiln: cannot keep the last-known-good configuration: %s\n", e->c_str());
        if (gauges) {
          auto c = gauges->config();
          c.last_error = *e;
          gauges->set_config_state(std::move(c));
        }
      }
    });
}

// This node's pools by model, for the balancers (a node without pools reports none).
node_health health_of(const directory_state& st) {
  node_health h;
  if (!st.d.gauges) return h;
  std::map<std::string, bool> serving;  // model -> some pool of it serves
  // A pool serves when its supervisor says so and its router ranks a replica (one whose
  // replicas wait for a worker node ranks none).
  for (const auto& p : st.d.gauges->pools())
    serving[p.model] = serving[p.model] || (p.status == "serving" && p.ranked != 0);
  for (const auto& [model, up] : serving) (up ? h.serving : h.unhealthy).push_back(model);
  const auto c = st.d.gauges->config();
  h.config_source = c.source;
  h.config_version = c.version;
  return h;
}

// A control node joined: ask it for its snapshot (later ones it pushes).
void ask_config(self_ptr self, const member_info& m) {
  if (control_here(self->state) || !has_role(m, config::node_role::control)) return;
  const auto from = m.directory.address();
  self->request(m.directory, std::chrono::seconds(5), snapshot_atom::value)
      .then([self, from](std::string& bytes) { take_config(self, from, bytes); }, [](caf::error&) {});
}

// A node that reached us, or that we reached: it joins the membership (once per handle).
void admit(self_ptr self, const member_info& m) {
  auto& st = self->state;
  if (m.node == st.d.self.node || !m.directory) return;
  auto it = st.members.find(m.node);
  if (it != st.members.end() && it->second == m) return;
  st.members[m.node] = m;
  self->monitor(m.directory);
  publish(self);
  ask_config(self, m);
}

void dial(self_ptr self, const std::string& endpoint) {
  auto& st = self->state;
  if (endpoint == st.d.self.endpoint || connected_to(st, endpoint) || st.pending.count(endpoint)) return;
  config::cluster_endpoint to;
  if (!config::parse_endpoint(endpoint, to)) return;  // what a peer told us may be anything
  st.pending.insert(endpoint);
  self->request(st.mm, std::chrono::seconds(3), caf::connect_atom::value, to.host, to.port)
      .then(
          [self, endpoint](const caf::node_id&, caf::strong_actor_ptr& ptr, const std::set<std::string>&) {
            self->state.pending.erase(endpoint);
            auto peer = caf::actor_cast<caf::actor>(ptr);
            if (!peer) return (void)self->state.seeds_tried.insert(endpoint);
            self->request(peer, std::chrono::seconds(3), join_atom::value, self->state.d.self)
                .then(
                    [self, endpoint](std::vector<member_info>& told) {
                      learn(self, told);
                      self->state.seeds_tried.insert(endpoint);
                    },
                    [self, endpoint](caf::error&) { self->state.seeds_tried.insert(endpoint); });
          },
          [self, endpoint](caf::error&) {
            self->state.pending.erase(endpoint);
            self->state.seeds_tried.insert(endpoint);
          });
}

// What another node knows: itself (first) joins; the others are dialled directly, so no
// member is reached through a third node (whose loss would look like theirs).
void learn(self_ptr self, const std::vector<member_info>& told) {
  if (told.empty()) return;
  admit(self, told.front());
  for (std::size_t i = 1; i < told.size(); ++i) {
    if (told[i].endpoint.empty() || told[i].node == self->state.d.self.node) continue;
    self->state.dial.insert(told[i].endpoint);
    dial(self, told[i].endpoint);
  }
}

caf::behavior directory(self_ptr self, directory_deps deps, caf::io::middleman_actor mm) {
  auto& st = self->state;
  st.d = std::move(deps);
  st.mm = std::move(mm);
  st.d.self.directory = caf::actor_cast<caf::actor>(self);
  st.members[st.d.self.node] = st.d.self;
  for (const auto& s : st.d.seeds) st.dial.insert(s.str());
  st.disk = actors::make_thread_loader(1);
  if (control_here(st)) self->send(self, publish_atom::value);
  self->set_down_handler([self](caf::down_msg& dm) {
    auto& st = self->state;
    bool changed = false;
    for (auto it = st.members.begin(); it != st.members.end();) {
      if (it->second.directory.address() == dm.source) {
        it = st.members.erase(it);
        changed = true;
      } else {
        ++it;
      }
    }
    std::erase_if(st.watchers, [&](const caf::actor& w) { return w.address() == dm.source; });
    if (changed) publish(self);
  });
  self->send(self, redial_atom::value);
  return {
      [self](redial_atom) {
        for (const auto& e : std::set<std::string>(self->state.dial)) dial(self, e);
        self->delayed_send(self, self->state.d.redial_every, redial_atom::value);
      },
      [self](join_atom, member_info& m) -> std::vector<member_info> {
        if (!m.endpoint.empty()) self->state.dial.insert(m.endpoint);
        admit(self, m);
        // This node first, then the others it knows.
        auto all = membership(self->state);
        std::stable_partition(all.begin(), all.end(),
                              [&](const member_info& x) { return x.node == self->state.d.self.node; });
        return all;
      },
      [self](watch_atom) -> std::vector<member_info> {
        auto w = caf::actor_cast<caf::actor>(self->current_sender());
        if (w) {
          self->state.watchers.push_back(w);
          self->monitor(w);
        }
        return membership(self->state);
      },
      [self](members_atom) -> std::vector<member_info> { return membership(self->state); },
      [self](publish_atom) {
        publish_config(self);
        self->delayed_send(self, self->state.d.publish_every, publish_atom::value);
      },
      [self](snapshot_atom) -> std::string { return self->state.bytes; },
      [self](health_atom) -> node_health { return health_of(self->state); },
      [self](die_atom) {
        // A region drill: this process ends as a crashed node would, with nothing flushed.
        std::fprintf(stderr, "kiln: region drill: node %s ends now\n", self->state.d.self.node.c_str());
        std::raise(SIGKILL);
      },
      [self](snapshot_atom, std::string& bytes) { take_config(self, caf::actor_cast<caf::actor_addr>(self->current_sender()), bytes); },
      [self](control_atom) -> caf::result<caf::actor> {
        // A control node answers with its store writer; another node asks the control node it
        // follows (none reachable: an error, and the caller waits).
        auto& st = self->state;
        if (control_here(st)) {
          if (auto w = caf::actor_cast<caf::actor>(self->home_system().registry().get(actors::store_name))) return w;
          return caf::make_error(caf::sec::invalid_argument, "node " + st.d.self.node + " has no store writer now");
        }
        const member_info* followed = followed_control(st);
        if (!followed)
          return caf::make_error(caf::sec::invalid_argument, "no control node is reachable from node " + st.d.self.node);
        return actors::pass_on<caf::actor>(self, followed->directory, control_atom::value, std::chrono::seconds(3));
      },
      [self](actors::find_worker_atom, const std::string& replica_id) -> caf::result<caf::actor> {
        // Replicas are placed once every seed has been tried (reached or not), so a node's
        // first replicas spread over the workers it can reach rather than the first to answer.
        auto& st = self->state;
        for (const auto& s : st.d.seeds)
          if (!st.seeds_tried.count(s.str()) && !connected_to(st, s.str()))
            return caf::make_error(caf::sec::invalid_argument, "node " + st.d.self.node + " is still joining its cluster");
        if (auto w = worker_for(st, replica_id)) return w;
        return caf::make_error(caf::sec::invalid_argument, "region " + self->state.d.self.region + " has no worker node");
      },
      [self](actors::host_replica& h) -> caf::result<caf::actor> {
        auto host = caf::actor_cast<caf::actor>(self->home_system().registry().get(actors::worker_host_name));
        if (!host) return caf::make_error(caf::sec::invalid_argument, "node " + self->state.d.self.node + " is not a worker node");
        return actors::pass_on<caf::actor>(self, host, std::move(h), std::chrono::minutes(5));
      },
      [self](actors::unhost_replica& u) {
        auto host = caf::actor_cast<caf::actor>(self->home_system().registry().get(actors::worker_host_name));
        if (host) self->send(host, std::move(u));
      },
      [self](actors::request& r) {
        auto admission = caf::actor_cast<caf::actor>(self->home_system().registry().get(actors::admission_name));
        if (admission) return self->send(admission, std::move(r));
        if (r.sink)
          self->send(r.sink, actors::stream_error{r.id, actors::errc::shutting_down,
                                                  "node " + self->state.d.self.node + " has no admission (stopping)", "", 1});
      },
  };
}

}  // namespace

caf::actor spawn_directory(caf::actor_system& sys, directory_deps deps) {
  return sys.spawn(directory, std::move(deps), sys.middleman().actor_handle());
}

}  // namespace kiln::cluster
