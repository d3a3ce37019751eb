#pragma once
// A kiln node: one process that runs the region's actors and the HTTP front.
#include <iosfwd>
#include <string>

#include "config/config.hpp"

namespace kiln::cluster {

struct serve_options {
  int port_override = -1;      ///< >= 0 replaces server.port (0: any free port)
  std::string store_override;  ///< non-empty: the store file instead of store_path
  std::string capture_path;    ///< non-empty: served requests are appended here for replay
};

/// Runs until SIGINT/SIGTERM, then drains and returns the process exit code.
int serve(const config::kiln_config& cfg, const serve_options& opts, std::ostream& out);

}  // namespace kiln::cluster
