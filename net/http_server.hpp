#pragma once
// The front: a Beast HTTP/1.1 server (keep-alive, one session per connection) that speaks
// the OpenAI API and hands chat completions to the admission actor. Beast stays inside
// http_server.cpp; this header is cheap to include.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <variant>

#include <caf/actor.hpp>

#include "actors/gauges.hpp"
#include "actors/request.hpp"
#include "config/config.hpp"
#include "config/registry.hpp"
#include "config/store.hpp"
#include "net/metrics.hpp"

namespace boost::asio { class io_context; }
namespace caf { class actor_system; }

namespace kiln::net {

struct server_deps {
  std::shared_ptr<const config::kiln_config> cfg;
  caf::actor_system* sys = nullptr;  ///< admission and the node supervisor are found in its registry
  std::shared_ptr<front_metrics> metrics;
  std::shared_ptr<actors::fleet_gauges> gauges;
  std::shared_ptr<actors::request_ids> ids;
  std::shared_ptr<const config::tenancy_board> tenants;  ///< teams and their (hashed) keys
  std::string admin_key;
  std::function<void(const std::string&)> access_log;  ///< one line per request
  /// Gates a version's pool off the io and actor threads; `done` gets the figures or why not
  /// (null: this node cannot gate).
  using gate_done = std::function<void(std::variant<config::load_test, std::string>)>;
  std::function<void(config::pool_config, gate_done)> gate;
  /// Runs blocking work (pulling weights, reading artifact files) off the io and actor
  /// threads (null: this node cannot).
  std::function<void(std::function<void()>)> background;
  /// True on the one I/O thread while it runs the actors too (`server.actors_on_io_thread`):
  /// the stream hub then writes a step's tokens itself (null: never).
  std::function<bool()> on_io_thread;
};

class http_server {
 public:
  http_server(boost::asio::io_context& ioc, server_deps deps);
  ~http_server();
  /// Binds host:port from config (port_override >= 0 replaces it); the bound port, or why not.
  std::variant<std::uint16_t, std::string> start(int port_override = -1);
  /// Drains: idle connections close, open requests finish, new ones get 503 (and /healthz
  /// says draining). After the configured grace, streams still open end with an error
  /// event. on_drained runs once all are closed.
  void drain(std::function<void()> on_drained);
  /// Every pool has loaded: /healthz says ok from now on.
  void set_ready();
  /// After the I/O threads have stopped: the front's actors end (before the actor system's).
  void stop();

  struct impl;

 private:
  std::shared_ptr<impl> impl_;
};

}  // namespace kiln::net
