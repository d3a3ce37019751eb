#include "cluster/ops_cli.hpp"

#include <cstdlib>
#include <iomanip>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cluster/http_call.hpp"
#include "config/artifact_pull.hpp"
#include "config/model_hash.hpp"

namespace kiln::cluster {

namespace {

using json = nlohmann::json;

constexpr const char* kOpsUsage =
    "usage: kiln ops [--url URL] [--admin-key K] [--json] COMMAND\n"
    "  (URL and key also from KILN_URL and KILN_ADMIN_KEY; URL defaults to http://127.0.0.1:8080)\n"
    "  pools MODEL [MODEL...]                 replicas, state and load of each version's pool\n"
    "  pool MODEL                             the same for one model\n"
    "  limits TEAM [MODEL TPM [BURST [CONCURRENCY [SHARE]]]]\n"
    "                                         a team's limits; with MODEL and TPM, set one\n"
    "  teams TEAM...                          each team's limits\n"
    "  versions MODEL                         registered versions with their hashes and status\n"
    "  register MODEL VERSION DIR|URL [--template FILE] [--precision P] [--replicas N]\n"
    "                                         hash DIR's files here (or take URL's listing: an artifact\n"
    "                                         endpoint, http://HOST:PORT/artifacts/SET) and register them\n"
    "                                         as MODEL@VERSION\n"
    "  gate MODEL VERSION                     load-test a version (the simulator's capacity scenario,\n"
    "                                         or one real engine for cpu/cuda) and store its capacity\n"
    "  rollout MODEL VERSION canary|shadow PERCENT\n"
    "                                         start or move a stage (0 ends it)\n"
    "  rollout MODEL                          where the rollout stands\n"
    "  decisions MODEL                        every stored rollout decision\n"
    "  alias MODEL VERSION                    point the alias (promote, or roll back)\n"
    "  scale                                  every pool's stored bounds (the pools table)\n"
    "  scale MODEL VERSION MIN MAX [WARM] [--region R]\n"
    "                                         set a pool's replica bounds and warm replicas\n"
    "  drain REPLICA                          drain a replica\n"
    "  undrain REPLICA                        return a draining or stopped replica to service\n"
    "  chaos TARGET ID ACTION [SECONDS]       one chaos action (target replica|engine|router)\n";

struct conn {
  std::string host;
  int port = 0;
  std::string key;
  bool as_json = false;
};

// Calls the admin API; prints the error object and returns 1 on a failure.
int call(const conn& c, const std::string& method, const std::string& path, const json& body, json& reply,
         std::ostream& err) {
  const std::vector<std::string> headers = {"Authorization: Bearer " + c.key, "Content-Type: application/json"};
  auto r = http_call(c.host, c.port, method, path, headers, body.is_null() ? "" : body.dump(), 120000);
  if (auto* e = std::get_if<std::string>(&r)) {
    err << "kiln ops: " << *e << "\n";
    return 1;
  }
  const auto& rep = std::get<http_reply>(r);
  reply = json::parse(rep.body, nullptr, false);
  if (rep.status >= 300) {
    const std::string msg = reply.is_object() && reply.contains("error") ? reply["error"].value("message", rep.body) : rep.body;
    err << "kiln ops: " << method << " " << path << ": " << rep.status << " " << msg << "\n";
    return 1;
  }
  return 0;
}

std::string cell(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_float()) {
    std::ostringstream o;
    o << std::setprecision(4) << v.get<double>();
    return o.str();
  }
  return v.dump();
}

// Rows of objects as a table of the named columns.
void table(std::ostream& out, const json& rows, const std::vector<std::string>& cols) {
  std::vector<std::size_t> w(cols.size());
  std::vector<std::vector<std::string>> cells;
  for (std::size_t i = 0; i < cols.size(); ++i) w[i] = cols[i].size();
  for (const auto& r : rows) {
    std::vector<std::string> line;
    for (std::size_t i = 0; i < cols.size(); ++i) {
      line.push_back(r.contains(cols[i]) ? cell(r[cols[i]]) : "");
      w[i] = std::max(w[i], line.back().size());
    }
    cells.push_back(std::move(line));
  }
  auto print = [&](const std::vector<std::string>& line) {
    for (std::size_t i = 0; i < line.size(); ++i) out << std::left << std::setw(static_cast<int>(w[i] + 2)) << line[i];
    out << "\n";
  };
  print(cols);
  for (const auto& l : cells) print(l);
}

void show_rollout(std::ostream& out, const json& v) {
  out << v["model"].get<std::string>() << ": live " << cell(v["live"]);
  if (!v["canary"]["version"].get<std::string>().empty())
    out << ", canary " << cell(v["canary"]["version"]) << " at " << cell(v["canary"]["percent"]) << "%";
  if (!v["shadow"]["version"].get<std::string>().empty())
    out << ", shadow " << cell(v["shadow"]["version"]) << " at " << cell(v["shadow"]["percent"]) << "%";
  if (!v["previous"].get<std::string>().empty()) out << ", previous " << cell(v["previous"]) << " kept loaded";
  out << "\n";
  json sides = json::array();
  for (const char* side : {"live", "canary", "shadow"}) {
    json s = v["window"][side];
    s["side"] = side;
    sides.push_back(s);
  }
  table(out, sides, {"side", "requests", "error_rate", "ttft_p95_s", "mean_output"});
  if (!v["decisions"].empty()) table(out, v["decisions"], {"version", "stage", "percent", "decision", "reason"});
}

int need(std::size_t n, const std::vector<std::string>& a, std::ostream& err) {
  if (a.size() >= n) return 0;
  err << "kiln ops: " << (a.empty() ? std::string("a command is needed") : a[0] + ": too few arguments") << "\n" << kOpsUsage;
  return 2;
}

}  // namespace

int run_ops(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  conn c;
  std::string url = std::getenv("KILN_URL") ? std::getenv("KILN_URL") : "http://127.0.0.1:8080";
  c.key = std::getenv("KILN_ADMIN_KEY") ? std::getenv("KILN_ADMIN_KEY") : "";
  std::vector<std::string> a;
  std::string tmpl_file, precision = "fp16", region;
  int replicas = 0;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& f = args[i];
    const bool valued = f == "--url" || f == "--admin-key" || f == "--template" || f == "--precision" || f == "--replicas" ||
                        f == "--region";
    if (valued && i + 1 >= args.size()) {
      err << "kiln ops: " << f << " needs a value\n" << kOpsUsage;
      return 2;
    }
    if (f == "--url") url = args[++i];
    else if (f == "--admin-key") c.key = args[++i];
    else if (f == "--template") tmpl_file = args[++i];
    else if (f == "--precision") precision = args[++i];
    else if (f == "--replicas") replicas = std::atoi(args[++i].c_str());
    else if (f == "--region") region = args[++i];
    else if (f == "--json") c.as_json = true;
    else if (f.starts_with("--")) {
      err << "kiln ops: unknown flag " << f << "\n" << kOpsUsage;
      return 2;
    } else a.push_back(f);
  }
  if (!parse_url(url, c.host, c.port)) {
    err << "kiln ops: --url must be http://HOST:PORT (got '" << url << "')\n";
    return 2;
  }
  if (int rc = need(1, a, err)) return rc;
  if (a[0] == "help") {
    out << kOpsUsage;
    return 0;
  }
  if (c.key.empty()) {
    err << "kiln ops: an admin key is needed (--admin-key or KILN_ADMIN_KEY)\n";
    return 2;
  }
  const std::string& cmd = a[0];
  json reply;
  auto done = [&](int rc, auto&& human) {
    if (rc) return rc;
    if (c.as_json) out << reply.dump(2) << "\n";
    else human();
    return 0;
  };
  if (cmd == "pools" || cmd == "pool") {
    if (int rc = need(2, a, err)) return rc;
    json all = json::array();
    for (std::size_t i = 1; i < a.size(); ++i) {
      if (int rc = call(c, "GET", "/admin/pools/" + a[i] + "/state", nullptr, reply, err)) return rc;
      all.push_back(reply);
    }
    reply = all.size() == 1 ? all[0] : all;
    return done(0, [&] {
      for (const auto& m : all) {
        json rows = json::array();
        for (const auto& p : m["versions"]) {
          json row = p;
          row["replicas"] = p["replicas"].size();
          rows.push_back(row);
        }
        out << cell(m["model"]) << "\n";
        table(out, rows, {"version", "status", "replicas", "queue_depth", "tokens_in_flight", "active_requests"});
      }
    });
  }
  if (cmd == "teams" || cmd == "limits") {
    if (int rc = need(2, a, err)) return rc;
    if (cmd == "limits" && a.size() >= 4) {
      json body = {{"model", a[2]}, {"tokens_per_minute", std::atof(a[3].c_str())}};
      if (a.size() > 4) body["burst"] = std::atof(a[4].c_str());
      if (a.size() > 5) body["max_concurrency"] = std::atoi(a[5].c_str());
      if (a.size() > 6) body["guaranteed_share"] = std::atof(a[6].c_str());
      return done(call(c, "PUT", "/admin/teams/" + a[1] + "/limits", body, reply, err),
                  [&] { table(out, reply["limits"], {"model", "tokens_per_minute", "burst", "max_concurrency", "guaranteed_share"}); });
    }
    const std::size_t last = cmd == "limits" ? 2 : a.size();
    json all = json::array();
    for (std::size_t i = 1; i < last; ++i) {
      if (int rc = call(c, "GET", "/admin/teams/" + a[i] + "/limits", nullptr, reply, err)) return rc;
      all.push_back(reply);
    }
    reply = all.size() == 1 ? all[0] : all;
    return done(0, [&] {
      for (const auto& t : all) {
        out << cell(t["team"]) << "\n";
        table(out, t["limits"], {"model", "tokens_per_minute", "burst", "max_concurrency", "guaranteed_share"});
      }
    });
  }
  if (cmd == "versions") {
    if (int rc = need(2, a, err)) return rc;
    return done(call(c, "GET", "/admin/models/" + a[1] + "/versions", nullptr, reply, err), [&] {
      table(out, reply["versions"], {"version", "status", "precision", "weights_hash", "load_test_tokens_per_s", "weights_uri"});
    });
  }
  if (cmd == "register") {
    if (int rc = need(4, a, err)) return rc;
    // Hashed here from the files, or from an artifact endpoint's listing (the node that
    // registers pulls the files and checks them against these hashes).
    std::string uri = a[3];
    std::variant<config::model_hashes, std::string> h = std::string();
    if (config::is_http_uri(uri)) {
      auto listed = config::list_artifacts(uri, c.key);
      if (auto* e = std::get_if<std::string>(&listed)) h = *e;
      else {
        std::vector<config::file_hash> files;
        for (const auto& f : std::get<std::vector<config::artifact_file>>(listed)) files.push_back({f.name, f.sha256});
        h = config::hashes_of(std::move(files), uri);
      }
    } else {
      auto dir = config::local_dir_of(uri);
      if (dir.index() == 1) {
        err << "kiln ops: " << std::get<1>(dir) << "\n";
        return 1;
      }
      uri = std::get<0>(dir);
      h = config::hash_model_dir(uri);
    }
    if (h.index() == 1) {
      err << "kiln ops: " << std::get<1>(h) << "\n";
      return 1;
    }
    json body = {{"version", a[2]},
                 {"weights_uri", uri},
                 {"weights_hash", std::get<0>(h).weights_hash},
                 {"tokenizer_hash", std::get<0>(h).tokenizer_hash},
                 {"precision", precision}};
    if (!tmpl_file.empty()) {
      std::ifstream in(tmpl_file);
      if (!in) {
        err << "kiln ops: cannot read " << tmpl_file << "\n";
        return 1;
      }
      body["chat_template"] = std::string(std::istreambuf_iterator<char>(in), {});
    }
    if (replicas > 0) body["engine_config"] = {{"replicas", replicas}};
    return done(call(c, "POST", "/admin/models/" + a[1] + "/versions", body, reply, err), [&] {
      out << "registered " << cell(reply["model"]) << "@" << cell(reply["version"]) << " (" << cell(reply["status"])
          << ", weights " << cell(reply["weights_hash"]).substr(0, 16) << ")\n";
    });
  }
  if (cmd == "gate") {
    if (int rc = need(3, a, err)) return rc;
    return done(call(c, "POST", "/admin/models/" + a[1] + "/versions/" + a[2] + "/gate", json::object(), reply, err), [&] {
      out << cell(reply["model"]) << "@" << cell(reply["version"]) << " " << cell(reply["status"]) << ": "
          << cell(reply["gate"]["tokens_per_s"]) << " output tokens/s per replica, " << cell(reply["gate"]["tokens_in_flight"])
          << " tokens in flight (" << cell(reply["gate"]["detail"]) << ")\n";
    });
  }
  if (cmd == "rollout") {
    if (int rc = need(2, a, err)) return rc;
    if (a.size() == 2)
      return done(call(c, "GET", "/admin/models/" + a[1] + "/rollout", nullptr, reply, err), [&] { show_rollout(out, reply); });
    if (int rc = need(5, a, err)) return rc;
    json body = {{"version", a[2]}, {"stage", a[3]}, {"percent", std::atof(a[4].c_str())}};
    return done(call(c, "PUT", "/admin/models/" + a[1] + "/rollout", body, reply, err), [&] { show_rollout(out, reply); });
  }
  if (cmd == "decisions") {
    if (int rc = need(2, a, err)) return rc;
    return done(call(c, "GET", "/admin/models/" + a[1] + "/rollouts", nullptr, reply, err), [&] {
      table(out, reply["rollouts"], {"seq", "version", "stage", "percent", "decision", "reason"});
    });
  }
  if (cmd == "alias") {
    if (int rc = need(3, a, err)) return rc;
    return done(call(c, "PUT", "/admin/models/" + a[1] + "/alias", json{{"version", a[2]}}, reply, err),
                [&] { show_rollout(out, reply); });
  }
  if (cmd == "scale") {
    if (a.size() == 1)
      return done(call(c, "GET", "/admin/pools/limits", nullptr, reply, err), [&] {
        table(out, reply["data"], {"model", "version", "region", "min_replicas", "max_replicas", "warm_replicas"});
      });
    if (int rc = need(5, a, err)) return rc;
    json body = json::object();
    const char* names[] = {"min_replicas", "max_replicas", "warm_replicas"};
    for (std::size_t i = 3; i < a.size() && i < 6; ++i) {
      if (a[i].empty() || a[i].size() > 6 || a[i].find_first_not_of("0123456789") != std::string::npos) {
        err << "kiln ops: scale: " << names[i - 3] << " must be a whole number (got '" << a[i] << "')\n";
        return 2;
      }
      body[names[i - 3]] = std::stoi(a[i]);
    }
    if (!region.empty()) body["region"] = region;
    return done(call(c, "PUT", "/admin/models/" + a[1] + "/versions/" + a[2] + "/pool", body, reply, err), [&] {
      out << cell(reply["model"]) << "@" << cell(reply["version"]) << " in " << cell(reply["region"]) << ": "
          << cell(reply["min_replicas"]) << " to " << cell(reply["max_replicas"]) << " replicas, "
          << cell(reply["warm_replicas"]) << " warm\n";
    });
  }
  if (cmd == "drain" || cmd == "undrain") {
    if (int rc = need(2, a, err)) return rc;
    return done(call(c, cmd == "drain" ? "PUT" : "DELETE", "/admin/replicas/" + a[1] + "/drain", nullptr, reply, err),
                [&] { out << cell(reply["replica_id"]) << ": " << cell(reply["state"]) << "\n"; });
  }
  if (cmd == "chaos") {
    if (int rc = need(4, a, err)) return rc;
    json body = {{"target", a[1]}, {"id", a[2]}, {"action", a[3]}};
    if (a.size() > 4) body["seconds"] = std::atof(a[4].c_str());
    return done(call(c, "POST", "/admin/chaos", body, reply, err), [&] { out << reply.dump() << "\n"; });
  }
  err << "kiln ops: unknown command '" << cmd << "'\n" << kOpsUsage;
  return 2;
}

}  // namespace kiln::cluster
