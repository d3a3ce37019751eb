// The store's registry tables: model_versions (immutable once registered) with their hashed
// files, models (each model's route) and rollouts (one row per decision).
#include <algorithm>
#include <chrono>

#include <nlohmann/json.hpp>

#include "config/artifact_pull.hpp"
#include "config/db.hpp"
#include "config/store.hpp"

namespace kiln::config {

namespace {

std::int64_t now_s() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

constexpr const char* kVersionColumns =
    "model, version, weights_uri, weights_hash, tokenizer_hash, chat_template, chat_template_hash, precision, "
    "gpus_per_replica, engine_config, load_test_tokens_per_s, load_test_tokens_in_flight, status, registered_at";

model_version version_of(statement& st) {
  model_version v;
  v.model = st.text(0);
  v.version = st.text(1);
  v.weights_uri = st.text(2);
  v.weights_hash = st.text(3);
  v.tokenizer_hash = st.text(4);
  v.chat_template = st.text(5);
  v.chat_template_hash = st.text(6);
  v.precision = st.text(7);
  v.gpus_per_replica = static_cast<int>(st.integer(8));
  v.engine_config = st.text(9);
  v.load_test_tokens_per_s = st.real(10);
  v.load_test_tokens_in_flight = st.real(11);
  v.status = st.text(12);
  v.registered_at = st.integer(13);
  return v;
}

}  // namespace

pool_config version_pool(const pool_config& base, const model_version& v, const artifacts_config& pulls) {
  pool_config c = base;
  c.version = v.version;
  if (is_http_uri(v.weights_uri)) {
    c.model_dir = pulled_dir({pulls.cache_dir, pulls.key}, v.model, v.version);
    c.weights_url = v.weights_uri;
    c.weights_key = pulls.key;
    c.make_if_absent.clear();
  } else if (!v.weights_uri.empty()) {
    auto dir = local_dir_of(v.weights_uri);
    if (dir.index() == 0) c.model_dir = std::get<0>(dir);
    c.make_if_absent.clear();
  }
  c.registered_files = v.files;
  c.chat_template = v.chat_template;
  const auto ec = nlohmann::json::parse(v.engine_config, nullptr, false);
  if (ec.is_object() && ec.contains("replicas") && ec["replicas"].is_number_integer())
    c.replicas = std::clamp(ec["replicas"].get<int>(), 1, 1024);
  return c;
}

bool valid_precision(const std::string& p) { return p == "fp16" || p == "int8" || p == "4bit"; }

bool model_version::same_content(const model_version& o) const {
  return model == o.model && version == o.version && weights_uri == o.weights_uri && weights_hash == o.weights_hash &&
         tokenizer_hash == o.tokenizer_hash && chat_template_hash == o.chat_template_hash && precision == o.precision &&
         gpus_per_replica == o.gpus_per_replica && engine_config == o.engine_config;
}

std::optional<model_version> store::version(const std::string& model, const std::string& ver) {
  statement st(*db_, (std::string("SELECT ") + kVersionColumns + " FROM model_versions WHERE model=? AND version=?").c_str());
  st.bind(1, model).bind(2, ver);
  if (!st.row()) return std::nullopt;
  model_version v = version_of(st);
  statement files(*db_, "SELECT file, sha256 FROM version_files WHERE model=? AND version=? ORDER BY file");
  files.bind(1, model).bind(2, ver);
  while (files.row()) v.files.push_back({files.text(0), files.text(1)});
  return v;
}

std::vector<model_version> store::versions(const std::string& model) {
  std::vector<std::string> names;
  {
    statement st(*db_, "SELECT version FROM model_versions WHERE model=? ORDER BY registered_at, version");
    st.bind(1, model);
    while (st.row()) names.push_back(st.text(0));
  }
  std::vector<model_version> out;
  for (const auto& n : names)
    if (auto v = version(model, n)) out.push_back(std::move(*v));
  return out;
}

store::registered store::register_version(const model_version& v) {
  registered r;
  if (auto have = version(v.model, v.version)) {
    r.version = *have;
    if (!have->same_content(v))
      r.conflict = "Version " + v.model + "@" + v.version + " is already registered with other content; a version never changes.";
    return r;
  }
  if (auto e = exec("BEGIN;")) {
    r.error = *e;
    return r;
  }
  model_version nv = v;
  nv.status = "registered";
  nv.registered_at = now_s();
  nv.load_test_tokens_per_s = nv.load_test_tokens_in_flight = 0;
  statement ins(*db_, (std::string("INSERT INTO model_versions(") + kVersionColumns +
                      ") VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?)").c_str());
  ins.bind(1, nv.model).bind(2, nv.version).bind(3, nv.weights_uri).bind(4, nv.weights_hash).bind(5, nv.tokenizer_hash);
  ins.bind(6, nv.chat_template).bind(7, nv.chat_template_hash).bind(8, nv.precision);
  ins.bind(9, static_cast<std::int64_t>(nv.gpus_per_replica)).bind(10, nv.engine_config);
  ins.bind(11, 0.0).bind(12, 0.0).bind(13, nv.status).bind(14, nv.registered_at);
  std::optional<std::string> e = ins.run();
  for (const auto& f : nv.files) {
    if (e) break;
    statement fi(*db_, "INSERT INTO version_files(model, version, file, sha256) VALUES(?,?,?,?)");
    fi.bind(1, nv.model).bind(2, nv.version).bind(3, f.file).bind(4, f.sha256);
    e = fi.run();
  }
  if (!e) e = exec("COMMIT;");
  if (e) {
    exec("ROLLBACK;");
    r.error = *e;
    return r;
  }
  r.version = std::move(nv);
  r.created = true;
  return r;
}

std::optional<std::string> store::set_version_status(const std::string& model, const std::string& ver,
                                                     const std::string& status) {
  statement st(*db_, "UPDATE model_versions SET status=? WHERE model=? AND version=?");
  st.bind(1, status).bind(2, model).bind(3, ver);
  return st.run();
}

std::optional<std::string> store::set_load_test(const std::string& model, const std::string& ver, double tokens_per_s,
                                                double tokens_in_flight) {
  statement st(*db_,
               "UPDATE model_versions SET load_test_tokens_per_s=?, load_test_tokens_in_flight=?, "
               "status=CASE WHEN status='registered' THEN 'gated' ELSE status END WHERE model=? AND version=?");
  st.bind(1, tokens_per_s).bind(2, tokens_in_flight).bind(3, model).bind(4, ver);
  return st.run();
}

std::vector<model_route> store::routes() {
  std::vector<model_route> out;
  statement st(*db_,
               "SELECT model, live_version, canary_version, canary_percent, shadow_version, shadow_percent, "
               "previous_version, previous_until FROM models ORDER BY model");
  while (st.row()) {
    model_route r;
    r.model = st.text(0);
    r.live = st.text(1);
    r.canary = st.text(2);
    r.canary_percent = st.real(3);
    r.shadow = st.text(4);
    r.shadow_percent = st.real(5);
    r.previous = st.text(6);
    r.previous_until = st.integer(7);
    out.push_back(std::move(r));
  }
  return out;
}

std::optional<std::string> store::put_route(model_route r, double keep_previous_s) {
  if (keep_previous_s > 0) r.previous_until = now_s() + static_cast<std::int64_t>(keep_previous_s);
  statement st(*db_,
               "INSERT INTO models(model, live_version, canary_version, canary_percent, shadow_version, shadow_percent, "
               "previous_version, previous_until) VALUES(?,?,?,?,?,?,?,?) ON CONFLICT(model) DO UPDATE SET "
               "live_version=excluded.live_version, canary_version=excluded.canary_version, "
               "canary_percent=excluded.canary_percent, shadow_version=excluded.shadow_version, "
               "shadow_percent=excluded.shadow_percent, previous_version=excluded.previous_version, "
               "previous_until=excluded.previous_until");
  st.bind(1, r.model).bind(2, r.live).bind(3, r.canary).bind(4, r.canary_percent).bind(5, r.shadow);
  st.bind(6, r.shadow_percent).bind(7, r.previous).bind(8, r.previous_until);
  return st.run();
}

std::int64_t store::add_rollout(const rollout_row& row) {
  statement st(*db_,
               "INSERT INTO rollouts(model, version, stage, percent, started_at, guard_metrics, decision, reason) "
               "VALUES(?,?,?,?,?,?,?,?) RETURNING seq");
  st.bind(1, row.model).bind(2, row.version).bind(3, row.stage).bind(4, row.percent);
  st.bind(5, row.at ? row.at : now_s()).bind(6, row.guard_metrics).bind(7, row.decision).bind(8, row.reason);
  return st.row() ? st.integer(0) : 0;
}

std::vector<rollout_row> store::rollouts(const std::string& model) {
  std::vector<rollout_row> out;
  statement st(*db_,
               "SELECT seq, model, version, stage, percent, started_at, decision, reason, guard_metrics FROM rollouts "
               "WHERE model=? ORDER BY seq");
  st.bind(1, model);
  while (st.row()) {
    rollout_row r;
    r.seq = st.integer(0);
    r.model = st.text(1);
    r.version = st.text(2);
    r.stage = st.text(3);
    r.percent = st.real(4);
    r.at = st.integer(5);
    r.decision = st.text(6);
    r.reason = st.text(7);
    r.guard_metrics = st.text(8);
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace kiln::config
