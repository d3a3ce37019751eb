#include "cluster/node.hpp"

#include <sys/resource.h>

#include <cstdio>
#include <iostream>
#include <memory>
#include <thread>
#include <utility>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>

#include "actors/region.hpp"
#include "net/http_server.hpp"

namespace kiln::cluster {

namespace {

void print_banner(std::ostream& out, const config::kiln_config& cfg, std::uint16_t port) {
  const std::string url = "http://" + cfg.server.host + ":" + std::to_string(port);
  out << "kiln serving on " << url << " (region " << cfg.region << ")\n";
  for (const auto& p : cfg.pools)
    out << "  model " << p.model << " version " << p.version << ": " << p.replicas << " replicas ("
        << (p.executor == config::executor_kind::cpu ? "cpu executor, " + p.resolved_model_dir() : std::string("sim executor"))
        << ")\n";
  for (const auto& t : cfg.teams) out << "  team " << t.name << " key " << t.api_key << "\n";
  out << "try:\n  curl -N " << url << "/v1/chat/completions -H 'Authorization: Bearer "
      << cfg.teams.front().api_key << "' -H 'Content-Type: application/json' -d '{\"model\":\""
      << cfg.pools.front().model
      << "\",\"stream\":true,\"max_tokens\":20,\"messages\":[{\"role\":\"user\",\"content\":\"Hello\"}]}'\n";
  out.flush();
}

}  // namespace

int serve(const config::kiln_config& cfg_in, const serve_options& opts, std::ostream& out) {
  // One descriptor per client connection: take all the process may have.
  rlimit files{};
  if (getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < files.rlim_max) {
    files.rlim_cur = files.rlim_max;
    setrlimit(RLIMIT_NOFILE, &files);
  }
  auto cfg = std::make_shared<const config::kiln_config>(cfg_in);
  // The io_context outlives the actor system: sinks post onto connection strands.
  boost::asio::io_context ioc;
  caf::actor_system_config caf_cfg;
  caf_cfg.set("scheduler.max-threads", static_cast<std::size_t>(cfg->server.actor_threads));
  caf_cfg.set("logger.console", caf::atom("none"));
  caf::actor_system sys{caf_cfg};

  auto gauges = std::make_shared<actors::engine_gauges>();
  const actors::region_handles region = actors::spawn_region(sys, cfg, gauges);

  net::server_deps deps;
  deps.cfg = cfg;
  deps.sys = &sys;
  deps.admission = region.admission;
  deps.metrics = std::make_shared<net::front_metrics>();
  deps.gauges = gauges;
  deps.access_log = [](const std::string& line) {
    std::fprintf(stderr, "%s\n", line.c_str());
  };
  net::http_server server(ioc, deps);
  auto bound = server.start(opts.port_override);
  if (auto* err = std::get_if<std::string>(&bound)) {
    std::cerr << "kiln: " << *err << "\n";
    actors::stop_region(region);
    return 1;
  }
  print_banner(out, *cfg, std::get<std::uint16_t>(bound));
  for (const auto& f : region.pool_failures) std::cerr << "kiln: pool unavailable: " << f << "\n";

  boost::asio::signal_set signals(ioc, SIGINT, SIGTERM);
  signals.async_wait([&](const boost::system::error_code& ec, int sig) {
    if (ec) return;
    std::fprintf(stderr, "kiln: signal %d: draining (grace %d ms)\n", sig, cfg->server.shutdown_grace_ms);
    server.drain([&ioc] { ioc.stop(); });
  });

  std::vector<std::thread> io_threads;
  for (int i = 1; i < cfg->server.io_threads; ++i) io_threads.emplace_back([&ioc] { ioc.run(); });
  ioc.run();
  for (auto& t : io_threads) t.join();

  actors::stop_region(region);
  sys.await_all_actors_done();
  std::fprintf(stderr, "kiln: stopped\n");
  return 0;
}

}  // namespace kiln::cluster
