#pragma once
// A whole node (supervision tree, admission, pools, routers, replicas, sim engines) on
// virtual time, for actor tests: requests enter where the front hands them to admission;
// admin calls go to the node supervisor as the front's do.
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <caf/all.hpp>

#include "actors/ask.hpp"
#include "actors/loader.hpp"
#include "actors/node_supervisor.hpp"
#include "actors/stream_sink.hpp"
#include "config/config.hpp"
#include "tests/support/actor_fixture.hpp"

namespace kiln::test {

/// The embedded default's sim pool alone, `replicas` of it, answers of 300-400 tokens.
inline config::kiln_config sim_node_config(int replicas) {
  auto r = config::parse_config(config::embedded_default_config(), "<embedded>");
  auto cfg = std::get<config::kiln_config>(r);
  cfg.pools.resize(1);
  cfg.models.resize(1);
  cfg.pools[0].replicas = replicas;
  cfg.pools[0].text = {300, 400};
  return cfg;
}

struct node_fixture : actor_fixture {
  std::shared_ptr<const config::kiln_config> cfg;
  std::shared_ptr<actors::fleet_gauges> gauges = std::make_shared<actors::fleet_gauges>();
  actors::request_ids ids{42};
  caf::actor node;
  std::vector<caf::actor> sinks;

  explicit node_fixture(config::kiln_config c = sim_node_config(2),
                        std::shared_ptr<const config::tenancy> tenants = std::make_shared<const config::tenancy>())
      : cfg(std::make_shared<const config::kiln_config>(std::move(c))) {
    actors::node_deps d;
    d.cfg = cfg;
    d.gauges = gauges;
    d.loader = actors::make_inline_loader();
    d.chaos_seed = 7;
    d.tenants = std::move(tenants);
    node = actors::spawn_node(sys, std::move(d));
    vt.run_ready();
  }
  ~node_fixture() {
    actors::stop_node(node);
    for (const auto& s : sinks) actors::stop_sink(s);
    vt.run_ready();
  }

  struct open_request {
    std::shared_ptr<recorded_stream> rec = std::make_shared<recorded_stream>();
    caf::actor sink;
    actors::request_id id;
  };

  open_request submit(int max_tokens, const std::string& prompt = "hello kiln", std::uint64_t seed = 1,
                      const std::string& model = "chat-7b", const std::string& team = "search",
                      const std::string& conversation = "",
                      engine::priority tier = engine::priority::standard) {
    open_request o;
    o.sink = actors::spawn_stream_sink(sys, o.rec);
    sinks.push_back(o.sink);
    actors::request r;
    r.id = o.id = ids.next();
    r.team = team;
    r.model = model;
    r.conversation_id = conversation;
    r.messages = {{"user", prompt}};
    r.sampling.max_tokens = max_tokens;
    r.sampling.temperature = 0.7;
    r.sampling.seed = seed;
    r.priority = tier;
    r.sink = o.sink;
    actors::submit(sys, std::move(r));
    return o;
  }

  /// Asks the node supervisor (as the admin API does) and runs until it answers.
  template <class Reply, class Msg>
  caf::expected<Reply> ask(Msg msg) {
    std::optional<caf::expected<Reply>> out;
    actors::ask<Reply>(sys, node, std::move(msg), std::chrono::seconds(5),
                       [&out](caf::expected<Reply> r) { out = std::move(r); });
    vt.run_ready();
    if (!out) return caf::make_error(caf::sec::request_timeout, "no answer");
    return std::move(*out);
  }

  actors::pool_view pool(const std::string& model = "chat-7b") {
    auto views = ask<std::vector<actors::pool_view>>(actors::pool_state_request{model});
    REQUIRE(views);
    REQUIRE(!views->empty());
    return views->front();
  }

  caf::expected<actors::chaos_report> chaos(actors::chaos_target target, const std::string& id, actors::chaos_action action,
                                            double seconds = 5) {
    actors::chaos_request c;
    c.target = target;
    c.id = id;
    c.action = action;
    c.order.seconds = seconds;
    return ask<actors::chaos_report>(c);
  }

  /// The replica whose engine holds a request now (running or waiting), or "".
  std::string busy_replica() const {
    for (const auto& e : gauges->engines())
      if (e.running + e.waiting > 0) return e.replica_id;
    return {};
  }
  int in_engines() const {
    int n = 0;
    for (const auto& e : gauges->engines()) n += e.running + e.waiting;
    return n;
  }
  /// Every engine's KV blocks are free again (nothing leaked).
  bool kv_all_free() const {
    for (const auto& e : gauges->engines())
      if (e.kv_blocks_free != e.kv_blocks_total) return false;
    return true;
  }
  std::uint64_t outcome(const std::string& what) const {
    std::uint64_t n = 0;
    for (const auto& [key, v] : gauges->outcomes())
      if (std::get<2>(key) == what) n += v;
    return n;
  }
};

}  // namespace kiln::test
