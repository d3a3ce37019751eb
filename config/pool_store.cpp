// The store's `pools` table: each pool's replica bounds and warm replicas per region, set by
// operators (PUT .../pool) and read by the pool's autoscaler; and `pool_upstreams`, a remote
// pool's upstreams as operators left them.
#include "config/db.hpp"
#include "config/store.hpp"

namespace kiln::config {

namespace {

constexpr int kMostReplicas = 10000;

pool_limits row_of(const statement& st) {
  pool_limits l;
  l.model = st.text(0);
  l.version = st.text(1);
  l.region = st.text(2);
  l.min_replicas = static_cast<int>(st.integer(3));
  l.max_replicas = static_cast<int>(st.integer(4));
  l.warm_replicas = static_cast<int>(st.integer(5));
  return l;
}

}  // namespace

std::string check_pool_limits(const pool_limits& l) {
  if (l.min_replicas < 0) return "min_replicas must be 0 or more";
  if (l.max_replicas < 1 || l.max_replicas > kMostReplicas)
    return "max_replicas must be between 1 and " + std::to_string(kMostReplicas);
  if (l.min_replicas > l.max_replicas) return "min_replicas must not exceed max_replicas";
  if (l.warm_replicas < 0 || l.warm_replicas > kMostReplicas)
    return "warm_replicas must be between 0 and " + std::to_string(kMostReplicas);
  return "";
}

std::optional<std::string> store::put_pool_limits(const pool_limits& l) {
  if (auto why = check_pool_limits(l); !why.empty()) return why;
  statement st(*db_,
               "INSERT INTO pools(model, version, region, min_replicas, max_replicas, warm_replicas) VALUES(?,?,?,?,?,?) "
               "ON CONFLICT(model, version, region) DO UPDATE SET min_replicas=excluded.min_replicas, "
               "max_replicas=excluded.max_replicas, warm_replicas=excluded.warm_replicas");
  st.bind(1, l.model).bind(2, l.version).bind(3, l.region);
  st.bind(4, static_cast<std::int64_t>(l.min_replicas))
      .bind(5, static_cast<std::int64_t>(l.max_replicas))
      .bind(6, static_cast<std::int64_t>(l.warm_replicas));
  return st.run();
}

std::optional<pool_limits> store::pool_limits_of(const std::string& model, const std::string& version,
                                                 const std::string& region) {
  statement st(*db_,
               "SELECT model, version, region, min_replicas, max_replicas, warm_replicas FROM pools "
               "WHERE model=? AND version=? AND region=?");
  st.bind(1, model).bind(2, version).bind(3, region);
  if (!st.row()) return std::nullopt;
  return row_of(st);
}

std::optional<std::string> store::put_pool_upstreams(const std::string& model, const std::string& version,
                                                     const std::string& region, const std::vector<std::string>& urls) {
  std::string lines;
  for (const auto& u : urls) {
    if (u.find('\n') != std::string::npos) return "an upstream URL holds a line break";
    lines += u + "\n";
  }
  statement st(*db_,
               "INSERT INTO pool_upstreams(model, version, region, urls) VALUES(?,?,?,?) "
               "ON CONFLICT(model, version, region) DO UPDATE SET urls=excluded.urls");
  st.bind(1, model).bind(2, version).bind(3, region).bind(4, lines);
  return st.run();
}

std::optional<std::vector<std::string>> store::pool_upstreams_of(const std::string& model, const std::string& version,
                                                                 const std::string& region) {
  statement st(*db_, "SELECT urls FROM pool_upstreams WHERE model=? AND version=? AND region=?");
  st.bind(1, model).bind(2, version).bind(3, region);
  if (!st.row()) return std::nullopt;
  std::vector<std::string> urls;
  const std::string lines = st.text(0);
  for (std::size_t at = 0; at < lines.size();) {
    const auto end = lines.find('\n', at);
    urls.push_back(lines.substr(at, end - at));
    at = end == std::string::npos ? lines.size() : end + 1;
  }
  return urls;
}

std::vector<pool_limits> store::all_pool_limits() {
  std::vector<pool_limits> out;
  statement st(*db_,
               "SELECT model, version, region, min_replicas, max_replicas, warm_replicas FROM pools "
               "ORDER BY model, version, region");
  while (st.row()) out.push_back(row_of(st));
  return out;
}

}  // namespace kiln::config
