#pragma once
// The front's paths: which handler answers which method on which path, and who may call it.
// Authentication runs on the head alone, before any body is read or parsed.
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "config/store.hpp"
#include "net/exchange.hpp"
#include "net/openai.hpp"

namespace kiln::net {

enum class access { open, team, admin };

/// Values of a pattern's {name} segments.
struct route_params {
  std::vector<std::pair<std::string, std::string>> values;
  std::string get(std::string_view name) const;
};

using handler = std::function<void(const std::shared_ptr<exchange>&, const route_params&)>;

class route_table {
 public:
  /// `pattern`: segments separated by '/', "{name}" matching any one non-empty segment.
  /// `max_body` > 0: this route's body limit in place of the server's.
  void add(std::string method, std::string pattern, access need, handler h, std::size_t max_body = 0);

  struct match {
    const handler* run = nullptr;  ///< null: no route for this method (see allowed)
    route_params params;
    bool path_known = false;
    access need = access::open;
    std::string allowed;  ///< methods the path takes, for 405
    std::size_t max_body = 0;  ///< the route's own body limit (0: the server's)
  };
  match find(std::string_view method, std::string_view path) const;

 private:
  struct route {
    std::string method;
    std::vector<std::string> segments;
    access need;
    handler run;
    std::size_t max_body = 0;
  };
  std::vector<route> routes_;
};

/// A query string's name=value pairs in order (pairs without '=' left out; no decoding).
std::vector<std::pair<std::string, std::string>> query_pairs(std::string_view query);

/// The bearer key of an Authorization header ("" if none).
std::string bearer_key(std::string_view authorization);
/// Checks a caller's key against what the path needs: 401 without a known key, 403 for a
/// team key on an admin path. Fills `who` on success.
std::optional<api_error> authenticate(access need, std::string_view authorization, const config::tenancy& tenants,
                                      const std::string& admin_key, caller& who);

}  // namespace kiln::net
