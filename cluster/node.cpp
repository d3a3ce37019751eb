#include "cluster/node.hpp"

#include <pthread.h>
#include <sys/resource.h>

#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <atomic>
#include <chrono>
#include <thread>
#include <utility>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scoped_actor.hpp>

#include "actors/loader.hpp"
#include "actors/node_supervisor.hpp"
#include "actors/worker_host.hpp"
#include "config/db.hpp"
#include "config/store.hpp"
#include "net/http_server.hpp"
#include "cluster/cluster_start.hpp"
#include "cluster/load_test.hpp"
#include "cluster/scheduler.hpp"
#include "sim/gate.hpp"

namespace kiln::cluster {

namespace {

std::string executor_name(const config::pool_config& p) {
  switch (p.executor) {
    case config::executor_kind::sim: return "sim executor";
    case config::executor_kind::cpu: return "cpu executor, " + p.resolved_model_dir();
    case config::executor_kind::cuda: return "cuda executor, " + p.resolved_model_dir();
    case config::executor_kind::remote: {
      std::string s = "remote executor:";
      for (const auto& u : p.upstreams) s += " " + u;
      return s;
    }
  }
  return "";
}

// Opens the store, seeding a new one from config; the tenancy it holds, or why not.
std::variant<config::tenancy, std::string> open_store(const std::string& path, const config::kiln_config& cfg,
                                                      std::unique_ptr<config::store>& held) {
  // A store nodes share keeps each node's usage watermark under the node's name (so nodes
  // sharing one must have distinct names: cluster.node, by default the region).
  auto opened = config::store::open(path, config::is_postgres_uri(path) ? cfg.cluster.node : "");
  if (auto* e = std::get_if<std::string>(&opened)) return *e;
  held = std::move(std::get<std::unique_ptr<config::store>>(opened));
  if (held->empty()) {
    // Nodes sharing a new store may seed it at once: the one that loses takes what is there.
    if (auto e = held->seed(cfg); e && !(held->shared() && !held->empty()))
      return "cannot seed store " + config::redacted_store_path(path) + ": " + *e;
  } else {
    std::fprintf(stderr, "kiln: teams, keys and limits come from the store %s (the config's apply to a new store)\n",
                 config::redacted_store_path(path).c_str());
  }
  return held->load_tenancy();
}

void print_banner(std::ostream& out, const config::kiln_config& cfg, std::uint16_t port, const std::string& admin_key,
                  const config::tenancy& tenants, const std::string& store_path, const std::string& capture_path,
                  std::uint16_t cluster_port) {
  const std::string url = "http://" + cfg.server.host + ":" + std::to_string(port);
  out << "kiln serving on " << url << " (region " << cfg.region << ")\n";
  const bool region_node = cfg.cluster.has(config::node_role::router);
  if (cfg.cluster.clustered()) {
    out << "  node " << cfg.cluster.node << ", roles";
    for (auto r : {config::node_role::front, config::node_role::router, config::node_role::worker, config::node_role::control})
      if (cfg.cluster.has(r)) out << " " << config::to_string(r);
    out << ", nodes connect on " << cfg.cluster.listen.host << ":" << cluster_port << "\n";
    if (cfg.cluster.has(config::node_role::front)) {
      out << "  regions by preference:";
      for (const auto& r : cfg.cluster.regions) out << " " << r;
      out << "\n";
    }
  }
  if (!region_node && cfg.cluster.has(config::node_role::worker))
    out << "  worker: hosts replicas of its region's pools for the router node\n";
  for (const auto& p : cfg.pools)
    if (region_node)
    out << "  model " << p.model << " version " << p.version << (cfg.live_version(p.model) == p.version ? " (live)" : "")
        << ": " << p.replicas << (p.replicas == 1 ? " replica (" : " replicas (") << executor_name(p) << ")\n";
  // A team's key is shown when the config still holds one the store knows; the store keeps
  // only hashes.
  std::string example_key;
  for (const auto& t : tenants.teams) {
    const config::team_config* from_cfg = nullptr;
    for (const auto& c : cfg.teams)
      if (c.name == t.name && tenants.team_by_key(c.api_key) == &t) from_cfg = &c;
    if (from_cfg) {
      out << "  team " << t.name << " key " << from_cfg->api_key << "\n";
      if (example_key.empty()) example_key = from_cfg->api_key;
    } else {
      out << "  team " << t.name << " (keys in the store)\n";
    }
  }
  out << "  admin key " << admin_key << "\n";
  const bool store_node = cfg.cluster.has(config::node_role::control);
  if (store_node) out << "  store " << config::redacted_store_path(store_path) << "\n";
  else if (region_node) out << "  teams, limits and usage: on the control node (last-known-good " << store_path << ".snapshot)\n";
  if (!capture_path.empty()) out << "  capturing served requests to " << capture_path << " (replay: kiln sim --trace)\n";
  if (!region_node && (store_node || cfg.cluster.has(config::node_role::worker))) {
    out << "  requests go to a region's router node; this node answers /healthz, /metrics"
        << (store_node ? " and the admin API" : "") << "\n";
    out.flush();
    return;
  }
  if (example_key.empty()) example_key = "KEY";
  out << "try:\n  curl -N " << url << "/v1/chat/completions -H 'Authorization: Bearer "
      << example_key << "' -H 'Content-Type: application/json' -d '{\"model\":\""
      << cfg.pools.front().model
      << "\",\"stream\":true,\"max_tokens\":20,\"messages\":[{\"role\":\"user\",\"content\":\"Hello\"}]}'\n";
  out.flush();
}

// Blocks the calling (main) thread, never an actor's, until every pool has loaded its
// replicas or failed; false when `stop` was set first.
bool wait_until_ready(caf::actor_system& sys, const caf::actor& node, const config::kiln_config& cfg,
                      const std::atomic<bool>& stop) {
  caf::scoped_actor self{sys};
  const auto t0 = std::chrono::steady_clock::now();
  auto next_note = t0 + std::chrono::seconds(5);
  while (!stop) {
    bool ready = true;
    std::string waiting;
    for (const auto& m : cfg.models) {
      self->request(node, std::chrono::seconds(2), actors::pool_state_request{m.name})
          .receive(
              [&](std::vector<actors::pool_view>& views) {
                for (const auto& v : views) {
                  bool loaded = v.status != "loading";
                  for (const auto& r : v.replicas)
                    loaded = loaded && (v.status != "serving" || (r.phase != "starting" && r.phase != "loading"));
                  if (!loaded) waiting += " " + v.model + "@" + v.version;
                  ready = ready && loaded;
                }
              },
              [&](caf::error&) { ready = false; });
    }
    if (ready) return true;
    if (std::chrono::steady_clock::now() >= next_note) {
      std::fprintf(stderr, "kiln: still loading:%s\n", waiting.c_str());
      next_note += std::chrono::seconds(5);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

// The region's actors on this node under the node supervisor: the store writer (a control
// node), meter, admission, pools and rollout controllers (a router node); an error line when
// the capture log cannot open.
std::variant<caf::actor, std::string> spawn_region(caf::actor_system& sys, std::shared_ptr<const config::kiln_config> cfg,
                                                   std::unique_ptr<config::store> store, const std::string& store_path,
                                                   const std::shared_ptr<config::tenancy_board>& tenants,
                                                   const std::shared_ptr<actors::fleet_gauges>& gauges,
                                                   const std::shared_ptr<actors::loader>& loader, std::uint64_t origin,
                                                   const serve_options& opts,
                                                   const std::shared_ptr<config::registry_board>& registry,
                                                   const config::registry_view& received) {
  actors::meter_deps md;
  // The usage log lives on local disk: where configured, beside a store file, or under
  // ~/.kiln for a server.
  md.wal_prefix = !cfg->usage_log.empty()                ? config::expand_home(cfg->usage_log)
                  : config::is_postgres_uri(store_path) ? config::expand_home("~/.kiln/" + cfg->cluster.node + ".usage")
                                                        : store_path + ".usage";
  if (store) {
    md.folded_seq = store->folded_seq();
  } else {
    // The control node's store: folds go to this node's ledger there.
    md.ledger = cfg->cluster.node;
    md.watermark_file = md.wal_prefix + "-folded";
  }
  md.unix_at_start =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  md.clock_at_start = caf::actor_clock::clock_type::now();  // the actor clock, real time here
  md.gauges = gauges;
  // Routes as stored (or as the control node's last snapshot held them): a promotion or a
  // canary outlives a restart.
  std::vector<std::pair<config::model_route, double>> routes;
  for (auto r : store ? store->routes() : received.routes) {
    const double left = r.previous.empty() ? -1.0 : std::max<double>(0, static_cast<double>(r.previous_until - md.unix_at_start));
    routes.emplace_back(std::move(r), left);
  }
  actors::node_deps nd;
  nd.cfg = cfg;
  nd.gauges = gauges;
  nd.loader = loader;
  nd.chaos_seed = origin;
  nd.tenants = tenants->get();
  nd.store = std::move(store);
  nd.board = tenants;
  nd.meter = md;
  nd.routes = std::move(routes);
  nd.calendar = {sys.clock().now(), md.unix_at_start};
  nd.serves = cfg->cluster.has(config::node_role::router);
  nd.registry = registry;
  nd.store_elsewhere = !nd.store && cfg->cluster.clustered();
  nd.registered = received.versions;
  if (!opts.capture_path.empty() && nd.serves) {
    auto log = config::capture_log::open(opts.capture_path);
    if (auto* e = std::get_if<std::string>(&log)) {
      return *e;
    }
    nd.capture = std::get<std::shared_ptr<config::capture_log>>(log);
  }
  return actors::spawn_node(sys, nd);
}

// A front-only node is ready once its balancer reaches a region; false when `stop` came first.
bool wait_for_a_region(const actors::fleet_gauges& gauges, const std::atomic<bool>& stop) {
  const auto t0 = std::chrono::steady_clock::now();
  auto next_note = t0 + std::chrono::seconds(5);
  while (!stop) {
    for (const auto& r : gauges.regions())
      if (r.up) return true;
    if (std::chrono::steady_clock::now() >= next_note) {
      std::fprintf(stderr, "kiln: no region reachable yet (cluster.seeds)\n");
      next_note += std::chrono::seconds(5);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

}  // namespace

int serve(const config::kiln_config& cfg_in, const serve_options& opts, std::ostream& out) {
  // One descriptor per client connection: take all the process may have.
  rlimit files{};
  if (getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < files.rlim_max) {
    files.rlim_cur = files.rlim_max;
    setrlimit(RLIMIT_NOFILE, &files);
  }
  // The admin key: the configured one, or one drawn now (printed in the banner); pulls from an
  // artifact endpoint use it unless [artifacts] names another.
  const std::string admin_key =
      cfg_in.admin_key.empty() ? "kiln-admin-" + actors::request_ids().next().str().substr(0, 16) : cfg_in.admin_key;
  auto cfg = [&] {
    auto c = std::make_shared<config::kiln_config>(cfg_in);
    if (c->artifacts.key.empty()) c->artifacts.key = admin_key;
    // Uploaded files live beside the store the command line names, too.
    const bool postgres = opts.store_override.rfind("postgres", 0) == 0;
    if (!opts.store_override.empty() && !postgres && c->batch.files_dir.empty()) c->batch.files_dir = opts.store_override + ".files";
    return std::shared_ptr<const config::kiln_config>(std::move(c));
  }();
  // A front-only node holds no store, pools or admission: its requests go to the regions. A
  // worker-only node hosts replicas for its region's router node and serves no requests itself.
  // A control node holds the store; a router node without it serves from the control node's
  // snapshots and keeps its usage log until the control node's store takes it.
  const bool region_node = cfg->cluster.has(config::node_role::router);
  const bool store_node = cfg->cluster.has(config::node_role::control);
  const bool worker_only = !region_node && cfg->cluster.has(config::node_role::worker);
  const std::string store_path = opts.store_override.empty() ? cfg->resolved_store_path() : opts.store_override;
  std::unique_ptr<config::store> store;
  std::shared_ptr<config::tenancy_board> tenants;
  // A node without a store keeps the control node's latest snapshot here.
  const std::string snapshot_path = store_path + ".snapshot";
  actors::config_state config_source;
  config_source.source = "store";
  // A control node in a cluster publishes its routes and versions; a router node without the
  // store starts from those its last-known-good snapshot holds.
  config::registry_view received;
  auto registry = store_node && cfg->cluster.clustered() ? std::make_shared<config::registry_board>() : nullptr;
  if (store_node) {
    auto loaded = open_store(store_path, *cfg, store);
    if (auto* e = std::get_if<std::string>(&loaded)) {
      std::cerr << "kiln: " << *e << "\n";
      return 1;
    }
    tenants = std::make_shared<config::tenancy_board>(std::move(std::get<config::tenancy>(loaded)));
  } else {
    tenants = std::make_shared<config::tenancy_board>(starting_tenancy(*cfg, snapshot_path, config_source, &received));
  }
  // The io_context outlives the actor system: sinks post onto connection strands.
  boost::asio::io_context ioc;
  caf::actor_system_config caf_cfg;
  caf_cfg.set("scheduler.max-threads", static_cast<std::size_t>(cfg->server.scheduler_threads()));
  caf_cfg.set("logger.console", caf::atom("none"));
  // An idle worker: CAF polls with 50 us sleeps (a context switch each) before it blocks;
  // blocking at once, woken by new work, costs far less (config.hpp). A blocked worker also
  // wakes after the relaxed sleep to steal from the others: every 1 ms where there are others;
  // a lone worker has no one to steal from and is woken by new work or its next deadline
  // (scheduler.hpp), so it sleeps on.
  caf_cfg.set("work-stealing.moderate-poll-attempts", static_cast<std::size_t>(cfg->server.actor_sleep_polls));
  const auto relaxed = cfg->server.scheduler_threads() == 1 ? std::chrono::milliseconds(1000) : std::chrono::milliseconds(1);
  caf_cfg.set("work-stealing.relaxed-sleep-duration", caf::timespan{relaxed});
  if (cfg->cluster.clustered()) configure_cluster(caf_cfg, *cfg);
  // With actors_on_io_thread the actor worker runs the io_context (scheduler.hpp); the guard
  // keeps it running while it has nothing to do, until the drain stops it.
  std::shared_ptr<io_sharing> shared_io;
  std::optional<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> io_guard;
  if (cfg->server.runs_actors_on_io_thread()) {
    shared_io = std::make_shared<io_sharing>(ioc);
    io_guard.emplace(ioc.get_executor());
  }
  use_lazy_timer_scheduler(caf_cfg, shared_io);
  caf::actor_system sys{caf_cfg};
  // Ends the front's I/O: where the actor worker runs it, stops it and waits for the worker to
  // leave it (so the front is never touched from two threads); else joins the I/O threads.
  std::vector<std::thread> io_threads;
  auto end_io = [&] {
    if (shared_io) {
      ioc.stop();
      shared_io->wait_released();
    }
    for (auto& t : io_threads) t.join();
  };
  // Model reads, weight uploads and KV allocation run here, never on the actor threads (and
  // end before the actor system does).
  auto loader = actors::make_thread_loader(2);

  auto gauges = std::make_shared<actors::fleet_gauges>();
  gauges->set_config_state(config_source);
  auto ids = std::make_shared<actors::request_ids>();
  caf::actor node, host;
  if (worker_only) {
    host = sys.spawn(actors::worker_host, actors::worker_host_deps{cfg, gauges, loader});
    sys.registry().put(actors::worker_host_name, host);
  }
  if (region_node || store_node) {
    auto spawned = spawn_region(sys, cfg, std::move(store), store_path, tenants, gauges, loader, ids->origin(), opts,
                                registry, received);
    if (auto* e = std::get_if<std::string>(&spawned)) {
      std::cerr << "kiln: " << *e << "\n";
      return 1;
    }
    node = std::get<caf::actor>(spawned);
  }

  net::server_deps deps;
  deps.cfg = cfg;
  deps.sys = &sys;
  deps.metrics = std::make_shared<net::front_metrics>();
  deps.gauges = gauges;
  deps.ids = ids;
  deps.tenants = tenants;
  deps.admin_key = admin_key;
  // A gate is seconds of work (the simulator's capacity scenario for sim pools, a short load
  // test on one engine for cpu and cuda): on the loader's threads.
  deps.gate = [loader](config::pool_config pool, net::server_deps::gate_done done) {
    loader->run([pool = std::move(pool), done = std::move(done)] {
      if (pool.executor != config::executor_kind::sim) {
        auto r = cluster::real_load_test(pool);
        if (auto* e = std::get_if<std::string>(&r)) return done(*e);
        return done(std::get<config::load_test>(r));
      }
      auto r = sim::gate_capacity(pool);
      if (auto* e = std::get_if<std::string>(&r)) return done(*e);
      const auto& g = std::get<sim::gate_result>(r);
      done(config::load_test{g.tokens_per_s, g.tokens_in_flight,
                             "simulator capacity scenario: highest passing step " + std::to_string(static_cast<int>(g.rate)) +
                                 " requests/s on one replica (p95 TTFT <= 1 s, streams >= 30 tokens/s)"});
    });
  };
  deps.background = [loader](std::function<void()> work) { loader->run(std::move(work)); };
  if (shared_io) deps.on_io_thread = [shared_io] { return shared_io->here(); };
  deps.access_log = [](const std::string& line) {
    std::fprintf(stderr, "%s\n", line.c_str());
  };
  net::http_server server(ioc, deps);
  auto bound = server.start(opts.port_override);
  cluster_handles joined;
  if (!std::holds_alternative<std::string>(bound) && cfg->cluster.clustered()) {
    auto started = start_cluster(sys, *cfg, cfg->server.host + ":" + std::to_string(std::get<std::uint16_t>(bound)), gauges,
                                 tenants, store_node ? std::string() : snapshot_path, registry);
    if (auto* err = std::get_if<std::string>(&started)) bound = *err;
    else joined = std::get<cluster_handles>(started);
  }
  if (auto* err = std::get_if<std::string>(&bound)) {
    std::cerr << "kiln: " << *err << "\n";
    end_io();
    server.stop();
    stop_cluster(joined);
    if (node) actors::stop_node(node);
    if (host) caf::anon_send_exit(host, caf::exit_reason::user_shutdown);
    sys.await_all_actors_done();
    loader->stop();
    return 1;
  }

  std::atomic<bool> stopping{false};
  boost::asio::signal_set signals(ioc, SIGINT, SIGTERM);
  signals.async_wait([&](const boost::system::error_code& ec, int sig) {
    if (ec) return;
    stopping = true;
    std::fprintf(stderr, "kiln: signal %d: draining (grace %d ms)\n", sig, cfg->server.shutdown_grace_ms);
    server.drain([&ioc] { ioc.stop(); });
  });

  // The front answers while the pools load (/healthz: loading; chat: 503 with Retry-After);
  // the banner comes once they serve.
  for (int i = 0; shared_io == nullptr && i < cfg->server.io_threads; ++i)
    io_threads.emplace_back([&ioc] {
      pthread_setname_np(pthread_self(), "kiln.io");  // the front's own CPU shows per thread in /proc
      ioc.run();
    });
  const bool ready = region_node  ? wait_until_ready(sys, node, *cfg, stopping)
                     : store_node || worker_only ? !stopping.load()
                                                 : wait_for_a_region(*gauges, stopping);
  if (ready) {
    server.set_ready();
    print_banner(out, *cfg, std::get<std::uint16_t>(bound), deps.admin_key, *tenants->get(), store_path,
                 opts.capture_path, joined.port);
  }
  if (shared_io) shared_io->wait_released();  // the drain stops the io_context
  end_io();

  server.stop();
  stop_cluster(joined);
  if (node) actors::stop_node(node);
  if (host) caf::anon_send_exit(host, caf::exit_reason::user_shutdown);
  sys.await_all_actors_done();
  loader->stop();  // before the actor system ends (see loader::stop)
  std::fprintf(stderr, "kiln: stopped\n");
  return 0;
}

}  // namespace kiln::cluster
