#include "cluster/chaos_cli.hpp"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include <nlohmann/json.hpp>

#include "actors/pool_supervisor.hpp"
#include "cluster/http_call.hpp"

namespace kiln::cluster {

namespace {

using json = nlohmann::json;
using clock_type = std::chrono::steady_clock;

struct chaos_options {
  std::string host;
  int port = 0;
  std::string admin_key;
  double every_s = 2;
  double for_s = 60;
  std::string target = "replica";
  std::string action = "kill";
  double seconds = 5;
  std::string region;  ///< non-empty: the region drill (drain, undrain or kill) through a front
  bool seconds_given = false;
};

/// "2s", "500ms", "1m", "1.5" (seconds); negative when it is none of these.
double parse_duration(const std::string& s) {
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (end == s.c_str() || !(v > 0)) return -1;
  const std::string unit(end);
  if (unit.empty() || unit == "s") return v;
  if (unit == "ms") return v / 1000;
  if (unit == "m") return v * 60;
  return -1;
}

bool parse(const std::vector<std::string>& args, chaos_options& o, std::string& err) {
  std::string url;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& f = args[i];
    if (i + 1 >= args.size()) {
      err = f + " needs a value";
      return false;
    }
    const std::string& v = args[++i];
    if (f == "--url") url = v;
    else if (f == "--admin-key") o.admin_key = v;
    else if (f == "--every") o.every_s = parse_duration(v);
    else if (f == "--for") o.for_s = parse_duration(v);
    else if (f == "--seconds") o.seconds = parse_duration(v), o.seconds_given = true;
    else if (f == "--region") o.region = v;
    else if (f == "--target") o.target = v;
    else if (f == "--action") o.action = v;
    else {
      err = "unknown option '" + f + "'";
      return false;
    }
  }
  if (!parse_url(url, o.host, o.port)) err = "--url must be http://HOST:PORT (got '" + url + "')";
  else if (o.admin_key.empty()) err = "--admin-key is required";
  else if (o.every_s <= 0 || o.for_s <= 0 || o.seconds <= 0) err = "--every, --for and --seconds take durations such as 2s or 500ms";
  else if (!o.region.empty()) {
    if (o.action != "kill" && o.action != "drain" && o.action != "undrain") err = "with --region, --action must be kill, drain or undrain";
  } else if (!actors::chaos_target_from(o.target)) err = "--target must be replica, engine, router, autoscaler or store";
  else if (!actors::chaos_action_from(o.action)) err = "--action must be kill, freeze, slow or fail";
  return err.empty();
}

std::string row(const json& r) {
  char line[256];
  std::snprintf(line, sizeof line, "    %-24s %-9s %-11s restarts=%-3d queue=%-4d tokens_in_flight=%lld",
                r.value("replica_id", "?").c_str(), r.value("state", "?").c_str(),
                r.value("in_ranking", false) ? "in-ranking" : "off-ranking", r.value("restarts", 0),
                r.value("queue_depth", 0), static_cast<long long>(r.value("tokens_in_flight", 0LL)));
  return line;
}

// The region drill: one call to the front's balancer, then the regions as it sees them.
int region_drill(const chaos_options& o, std::ostream& out, std::ostream& err) {
  const std::vector<std::string> auth = {"Authorization: Bearer " + o.admin_key, "Content-Type: application/json"};
  const std::string path = "/admin/regions/" + o.region + (o.action == "kill" ? "/kill" : "/drain");
  const std::string method = o.action == "undrain" ? "DELETE" : "POST";
  const std::string body = o.action == "drain" ? json{{"seconds", o.seconds_given ? o.seconds : 0.0}}.dump() : "";
  auto reply = http_call(o.host, o.port, method, path, auth, body);
  if (auto* e = std::get_if<std::string>(&reply)) {
    err << "kiln chaos: " << *e << "\n";
    return 1;
  }
  const auto& r = std::get<http_reply>(reply);
  const json b = json::parse(r.body, nullptr, false);
  if (r.status != 200 || !b.is_object()) {
    err << "kiln chaos: " << (b.is_object() && b.contains("error") ? b["error"].value("message", r.body) : r.body) << "\n";
    return 1;
  }
  out << o.action << " region " << o.region << ": router nodes";
  for (const auto& n : b.value("router_nodes", json::array())) out << " " << n.get<std::string>();
  out << "\n";
  std::this_thread::sleep_for(std::chrono::seconds(o.action == "kill" ? 2 : 0));
  auto state = http_call(o.host, o.port, "GET", "/admin/regions", auth, "");
  if (auto* s = std::get_if<http_reply>(&state); s && s->status == 200) {
    const json st = json::parse(s->body, nullptr, false);
    if (st.is_object() && st.contains("regions"))
      for (const auto& g : st["regions"])
        out << "  region " << g.value("region", "?") << ": " << g.value("status", "?") << ", in flight "
            << g.value("requests_in_flight", 0) << ", retried " << g.value("retried", 0) << ", failed mid-stream "
            << g.value("failed_mid_stream", 0) << "\n";
  }
  return 0;
}

}  // namespace

int run_chaos(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  chaos_options o;
  std::string why;
  if (!parse(args, o, why)) {
    err << "kiln chaos: " << why << "\n";
    return 2;
  }
  if (!o.region.empty()) return region_drill(o, out, err);
  const std::vector<std::string> auth = {"Authorization: Bearer " + o.admin_key, "Content-Type: application/json"};
  const auto t0 = clock_type::now();
  const auto period = std::chrono::duration<double>(o.every_s);
  int hits = 0, misses = 0;
  for (int k = 0;; ++k) {
    const auto at = t0 + std::chrono::duration_cast<clock_type::duration>(period * k);
    if (std::chrono::duration<double>(at - t0).count() >= o.for_s) break;
    std::this_thread::sleep_until(at);
    const double t = std::chrono::duration<double>(clock_type::now() - t0).count();
    const json order = {{"target", o.target}, {"id", "random"}, {"action", o.action}, {"seconds", o.seconds}};
    auto reply = http_call(o.host, o.port, "POST", "/admin/chaos", auth, order.dump());
    char stamp[32];
    std::snprintf(stamp, sizeof stamp, "[%7.2fs] ", t);
    if (auto* e = std::get_if<std::string>(&reply)) {
      err << "kiln chaos: " << *e << "\n";
      return 1;
    }
    const auto& r = std::get<http_reply>(reply);
    const json body = json::parse(r.body, nullptr, false);
    if (r.status == 401 || r.status == 403) {
      err << "kiln chaos: the admin key was refused (" << r.status << ")\n";
      return 1;
    }
    if (r.status != 200 || body.is_discarded()) {
      ++misses;
      out << stamp << "no " << o.action << ": "
          << (body.is_object() && body.contains("error") ? body["error"].value("message", r.body) : r.body) << "\n";
      continue;
    }
    ++hits;
    const std::string model = body.value("model", "");
    out << stamp << o.action << " " << body.value("target", "") << " " << body.value("id", "") << " (" << model << "@"
        << body.value("version", "") << ")\n";
    // The pool as its router sees it just after.
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    auto state = http_call(o.host, o.port, "GET", "/admin/pools/" + model + "/state", auth, "");
    if (auto* s = std::get_if<http_reply>(&state); s && s->status == 200) {
      const json st = json::parse(s->body, nullptr, false);
      if (st.is_object() && st.contains("versions"))
        for (const auto& v : st["versions"])
          out << "  pool " << model << "@" << v.value("version", "?") << ": " << v.value("status", "?")
              << ", restarts=" << v.value("restarts", 0) << ", retried=" << v.value("retried", 0)
              << ", active_requests=" << v.value("active_requests", 0) << "\n";
      if (st.is_object() && st.contains("replicas"))
        for (const auto& rep : st["replicas"]) out << row(rep) << "\n";
    }
    out.flush();
  }
  out << "kiln chaos: " << hits << " " << o.action << (hits == 1 ? "" : "s") << " done, " << misses << " refused\n";
  return 0;
}

}  // namespace kiln::cluster
