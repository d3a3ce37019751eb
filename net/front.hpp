#pragma once
// What the front's connections and handlers share (internal to net/): the server's
// dependencies, whether it drains, and the route table.
#include <atomic>
#include <cstdint>
#include <functional>

#include "net/http_server.hpp"
#include "net/routes.hpp"

namespace kiln::net {

struct front {
  server_deps deps;
  std::atomic<bool> draining{false};
  std::atomic<bool> ready{false};  ///< every pool has loaded (or failed to)
  route_table routes;
  caf::actor hub;  ///< the one sink of every stream this front serves (net/stream_hub.hpp)
  /// A new strand of the I/O threads: what it is given runs there, one thing at a time.
  std::function<std::function<void(std::function<void()>)>()> new_strand;
  caf::actor batches;  ///< runs OpenAI batches (net/batch_runner.hpp)
};

/// Seconds since the epoch, now (the front may read the wall clock; actors may not).
std::int64_t unix_now();

/// Each adds its paths to the front's route table.
void add_openai_routes(front& f);
void add_admin_routes(front& f);
void add_cluster_admin_routes(front& f);
void add_team_routes(front& f);
void add_model_routes(front& f);
void add_ops_routes(front& f);
void add_pool_limit_routes(front& f);
void add_tokenize_routes(front& f);
void add_artifact_routes(front& f);
void add_file_routes(front& f);
void add_batch_routes(front& f);
void add_console_routes(front& f);

}  // namespace kiln::net
