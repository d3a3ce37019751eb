#include "net/routes.hpp"

namespace kiln::net {

namespace {

std::vector<std::string> split_path(std::string_view path) {
  std::vector<std::string> out;
  std::size_t i = 0;
  while (i <= path.size()) {
    const std::size_t j = path.find('/', i);
    const std::size_t end = j == std::string_view::npos ? path.size() : j;
    if (end > i) out.emplace_back(path.substr(i, end - i));
    if (j == std::string_view::npos) break;
    i = j + 1;
  }
  return out;
}

bool is_param(const std::string& seg) { return seg.size() > 2 && seg.front() == '{' && seg.back() == '}'; }

}  // namespace

std::string http_request::header(std::string_view name) const {
  for (const auto& [k, v] : headers)
    if (k == name) return v;
  return {};
}

std::string route_params::get(std::string_view name) const {
  for (const auto& [k, v] : values)
    if (k == name) return v;
  return {};
}

void route_table::add(std::string method, std::string pattern, access need, handler h, std::size_t max_body) {
  routes_.push_back({std::move(method), split_path(pattern), need, std::move(h), max_body});
}

route_table::match route_table::find(std::string_view method, std::string_view path) const {
  match m;
  const auto segs = split_path(path);
  if (path.empty() || path.front() != '/') return m;
  for (const auto& r : routes_) {
    if (r.segments.size() != segs.size()) continue;
    route_params params;
    bool ok = true;
    for (std::size_t i = 0; i < segs.size() && ok; ++i) {
      if (is_param(r.segments[i])) params.values.emplace_back(r.segments[i].substr(1, r.segments[i].size() - 2), segs[i]);
      else ok = r.segments[i] == segs[i];
    }
    if (!ok) continue;
    m.path_known = true;
    m.need = r.need;
    if (!m.allowed.empty()) m.allowed += ", ";
    m.allowed += r.method;
    if (r.method == method && !m.run) {
      m.run = &r.run;
      m.params = std::move(params);
      m.max_body = r.max_body;
    }
  }
  return m;
}

std::vector<std::pair<std::string, std::string>> query_pairs(std::string_view query) {
  std::vector<std::pair<std::string, std::string>> out;
  std::size_t pos = 0;
  while (pos <= query.size()) {
    const auto amp = query.find('&', pos);
    const std::string_view kv = query.substr(pos, amp == std::string_view::npos ? std::string_view::npos : amp - pos);
    pos = amp == std::string_view::npos ? query.size() + 1 : amp + 1;
    const auto eq = kv.find('=');
    if (!kv.empty() && eq != std::string_view::npos) out.emplace_back(kv.substr(0, eq), kv.substr(eq + 1));
  }
  return out;
}

std::string bearer_key(std::string_view v) {
  constexpr std::string_view prefix = "Bearer ";
  if (v.size() < prefix.size()) return {};
  for (std::size_t i = 0; i < prefix.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(v[i])) != std::tolower(static_cast<unsigned char>(prefix[i]))) return {};
  v.remove_prefix(prefix.size());
  while (!v.empty() && v.front() == ' ') v.remove_prefix(1);
  while (!v.empty() && v.back() == ' ') v.remove_suffix(1);
  return std::string(v);
}

std::optional<api_error> authenticate(access need, std::string_view authorization, const config::tenancy& tenants,
                                      const std::string& admin_key, caller& who) {
  if (need == access::open) return std::nullopt;
  const std::string key = bearer_key(authorization);
  if (key.empty())
    return api_error{401, "invalid_request_error",
                     "You didn't provide an API key. Send it as 'Authorization: Bearer KEY'.", "", "invalid_api_key"};
  const bool is_admin = !admin_key.empty() && key == admin_key;
  const config::team_config* team = tenants.team_by_key(key);
  if (need == access::admin) {
    if (is_admin) {
      who.admin = true;
      return std::nullopt;
    }
    if (team) return api_error{403, "invalid_request_error", "This route needs the admin key.", "", "forbidden"};
    return api_error{401, "invalid_request_error", "Incorrect API key provided.", "", "invalid_api_key"};
  }
  if (!team) return api_error{401, "invalid_request_error", "Incorrect API key provided.", "", "invalid_api_key"};
  who.team = team->name;
  return std::nullopt;
}

}  // namespace kiln::net
