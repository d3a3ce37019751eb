#pragma once
// A configuration snapshot: what the control node pushes to every other node (teams, keys,
// limits, model routes and the registered versions they name), versioned, and what each node keeps on disk as its last-known-good
// to serve from while the control node is unreachable. On disk and on the wire it is one
// msgpack map behind a header: magic "KILNSNP1", the XXH64 of the payload and its length, so
// a torn or altered file is refused rather than half-read.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "config/registry.hpp"
#include "config/store.hpp"

namespace kiln::config {

struct config_snapshot {
  std::uint64_t version = 0;  ///< increases with each change the control node makes
  std::string origin;         ///< the control node that made it
  std::int64_t made_unix = 0;
  tenancy tenants;            ///< teams with limits and tiers, keys as hashes
  std::vector<model_route> routes;
  std::vector<model_version> versions;  ///< the registrations the routes name
};

/// The registry's part of a snapshot: every stored route and the registered versions they
/// name, as the control node's store writer last read them (it sets the board after each
/// change; the directory publishes what it holds).
struct registry_view {
  std::vector<model_route> routes;
  std::vector<model_version> versions;
};

using registry_board = board<registry_view>;

/// The snapshot's version: a digest of what it holds (teams, keys, limits, routes), so equal
/// configurations have equal versions on every node and across restarts.
std::uint64_t content_version(const config_snapshot& s);
/// 16 hex digits.
std::string version_text(std::uint64_t v);

/// The snapshot as bytes (header and msgpack payload).
std::string encode_snapshot(const config_snapshot& s);
/// The snapshot the bytes hold, or why they hold none (truncated, checksum, not msgpack...).
std::variant<config_snapshot, std::string> decode_snapshot(std::string_view bytes);

/// Writes the snapshot so that a crash leaves the old file or the new one, never a mix
/// (a temp file, fsync, rename, fsync of the directory); the error, or nothing.
std::optional<std::string> save_snapshot(const std::string& path, const config_snapshot& s);
/// The snapshot in the file, or why there is none usable.
std::variant<config_snapshot, std::string> load_snapshot(const std::string& path);

}  // namespace kiln::config
