#include "config/store.hpp"

#include "config/usage_wal.hpp"
#include "config/db.hpp"
#include "config/region_shares.hpp"

#include <openssl/evp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <random>

namespace kiln::config {

namespace {

// Version 1: seed 000's schema, and api_keys holding hashes only.
constexpr const char* kSchemaV1 = R"sql(
CREATE TABLE models(model TEXT PRIMARY KEY, live_version TEXT, canary_version TEXT, canary_percent REAL);
CREATE TABLE model_versions(model TEXT, version TEXT, weights_uri TEXT, weights_hash TEXT, tokenizer_hash TEXT,
  chat_template_hash TEXT, precision TEXT CHECK(precision IN ('fp16','int8','4bit')), gpus_per_replica INTEGER,
  engine_config TEXT, eval_report_uri TEXT, load_test_tokens_per_s REAL, load_test_tokens_in_flight REAL, status TEXT,
  PRIMARY KEY(model, version));
CREATE TABLE pools(model TEXT, version TEXT, region TEXT, min_replicas INTEGER, max_replicas INTEGER,
  PRIMARY KEY(model, version, region));
CREATE TABLE replicas(replica_id TEXT PRIMARY KEY, model TEXT, version TEXT, region TEXT, node TEXT,
  state TEXT CHECK(state IN ('starting','loading','serving','draining')), queue_depth INTEGER, tokens_in_flight INTEGER,
  last_heartbeat INTEGER);
CREATE TABLE teams(team TEXT PRIMARY KEY, name TEXT, max_priority TEXT NOT NULL DEFAULT 'interactive');
CREATE TABLE api_keys(key_id TEXT PRIMARY KEY, team TEXT NOT NULL REFERENCES teams(team), key_hash TEXT NOT NULL UNIQUE,
  created_at INTEGER NOT NULL, revoked_at INTEGER);
CREATE TABLE team_limits(team TEXT REFERENCES teams(team), model TEXT, tokens_per_minute REAL, burst REAL,
  max_concurrency INTEGER, guaranteed_share REAL, PRIMARY KEY(team, model));
CREATE TABLE usage(team TEXT, model TEXT, version TEXT, minute INTEGER, prompt_tokens INTEGER, cached_tokens INTEGER,
  output_tokens INTEGER, requests INTEGER, shed INTEGER, PRIMARY KEY(team, model, version, minute));
CREATE TABLE rollouts(model TEXT, version TEXT, stage TEXT CHECK(stage IN ('shadow','canary')), percent REAL,
  started_at INTEGER, guard_metrics TEXT, decision TEXT);
)sql";

// Version 2: the usage meter's watermark, written with the rows it folds.
constexpr const char* kSchemaV2 = R"sql(
CREATE TABLE meter_state(id INTEGER PRIMARY KEY CHECK(id = 1), folded_seq INTEGER NOT NULL);
INSERT INTO meter_state(id, folded_seq) VALUES(1, 0);
)sql";

// Migrations by the version they produce; each runs in one transaction.
// Version 3: the registry. Each version's hashed files, the chat template's text, the
// route's shadow and previous version, and rollouts as one row per decision (version 1's
// table was never written, so it is replaced).
constexpr const char* kSchemaV3 = R"sql(
ALTER TABLE model_versions ADD COLUMN chat_template TEXT;
ALTER TABLE model_versions ADD COLUMN registered_at INTEGER;
CREATE TABLE version_files(model TEXT, version TEXT, file TEXT, sha256 TEXT NOT NULL, PRIMARY KEY(model, version, file));
ALTER TABLE models ADD COLUMN shadow_version TEXT;
ALTER TABLE models ADD COLUMN shadow_percent REAL;
ALTER TABLE models ADD COLUMN previous_version TEXT;
ALTER TABLE models ADD COLUMN previous_until INTEGER;
DROP TABLE rollouts;
CREATE TABLE rollouts(seq INTEGER PRIMARY KEY AUTOINCREMENT, model TEXT NOT NULL, version TEXT NOT NULL,
  stage TEXT CHECK(stage IN ('shadow','canary','live','retired')), percent REAL, started_at INTEGER,
  guard_metrics TEXT, decision TEXT, reason TEXT);
)sql";

// Version 4: a pool's warm replicas (loaded, kept out of routing until scaling needs them).
constexpr const char* kSchemaV4 = R"sql(
ALTER TABLE pools ADD COLUMN warm_replicas INTEGER NOT NULL DEFAULT 0;
)sql";

// Version 5: one usage watermark per ledger (each node that meters into a shared store has
// its own record sequence); the single node's watermark becomes ledger ''.
constexpr const char* kSchemaV5 = R"sql(
CREATE TABLE meter_ledgers(ledger TEXT PRIMARY KEY, folded_seq INTEGER NOT NULL);
INSERT INTO meter_ledgers(ledger, folded_seq) SELECT '', folded_seq FROM meter_state;
DROP TABLE meter_state;
)sql";

// Version 6: what each region's teams asked for lately, from which regions share limits.
constexpr const char* kSchemaV6 = R"sql(
CREATE TABLE region_use(region TEXT, team TEXT, model TEXT, tokens_per_minute REAL NOT NULL, at INTEGER NOT NULL,
  PRIMARY KEY(region, team, model));
)sql";

// Version 7: the request ids metered lately, so a request two ledgers recorded (a front
// metering what a lost region had sent, and the region's own record folded after its
// restart) counts once.
constexpr const char* kSchemaV7 = R"sql(
CREATE TABLE metered_ids(id_origin INTEGER NOT NULL, id_seq INTEGER NOT NULL, minute INTEGER NOT NULL,
  ledger TEXT NOT NULL, seq INTEGER NOT NULL, PRIMARY KEY(id_origin, id_seq));
CREATE INDEX metered_ids_minute ON metered_ids(minute);
)sql";

// Version 8: OpenAI's files (their bytes live in the files directory) and batches.
constexpr const char* kSchemaV8 = R"sql(
CREATE TABLE files(file_id TEXT PRIMARY KEY, team TEXT NOT NULL, purpose TEXT NOT NULL, filename TEXT NOT NULL,
  bytes INTEGER NOT NULL, created_at INTEGER NOT NULL, path TEXT NOT NULL);
CREATE INDEX files_team ON files(team);
CREATE TABLE batches(batch_id TEXT PRIMARY KEY, team TEXT NOT NULL, model TEXT NOT NULL, endpoint TEXT NOT NULL,
  input_file_id TEXT NOT NULL, completion_window TEXT NOT NULL, metadata TEXT NOT NULL, status TEXT NOT NULL,
  output_file_id TEXT NOT NULL, error_file_id TEXT NOT NULL, errors TEXT NOT NULL, input_path TEXT NOT NULL,
  output_path TEXT NOT NULL, error_path TEXT NOT NULL, node TEXT NOT NULL, created_at INTEGER NOT NULL, expires_at INTEGER NOT NULL, in_progress_at INTEGER NOT NULL,
  finalizing_at INTEGER NOT NULL, completed_at INTEGER NOT NULL, failed_at INTEGER NOT NULL, expired_at INTEGER NOT NULL,
  cancelling_at INTEGER NOT NULL, cancelled_at INTEGER NOT NULL, total INTEGER NOT NULL, completed INTEGER NOT NULL,
  failed INTEGER NOT NULL);
CREATE INDEX batches_team ON batches(team, created_at);
)sql";

// Version 9: a remote pool's upstreams as operators left them (one line per base URL).
constexpr const char* kSchemaV9 = R"sql(
CREATE TABLE pool_upstreams(model TEXT NOT NULL, version TEXT NOT NULL, region TEXT NOT NULL, urls TEXT NOT NULL,
  PRIMARY KEY(model, version, region));
)sql";

const char* const kMigrations[] = {kSchemaV1, kSchemaV2, kSchemaV3, kSchemaV4, kSchemaV5,
                                   kSchemaV6, kSchemaV7, kSchemaV8, kSchemaV9};

// Runs `body` in one transaction: committed when it returns no error, else rolled back and
// its error returned.
std::optional<std::string> in_transaction(db& d, const std::function<std::optional<std::string>()>& body) {
  if (auto e = d.exec("BEGIN;")) return e;
  if (auto e = body()) {
    d.exec("ROLLBACK;");
    return e;
  }
  return d.exec("COMMIT;");
}

std::int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string hex(const unsigned char* p, std::size_t n) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string out;
  for (std::size_t i = 0; i < n; ++i) {
    out += digits[p[i] >> 4];
    out += digits[p[i] & 15];
  }
  return out;
}


}  // namespace

std::string key_hash(std::string_view key) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_Digest(key.data(), key.size(), digest, &n, EVP_sha256(), nullptr);
  return hex(digest, n);
}

std::string new_api_key() {
  std::random_device rd;
  unsigned char bytes[24];
  for (auto& b : bytes) b = static_cast<unsigned char>(rd());
  return "kiln-" + hex(bytes, sizeof bytes);
}

const team_config* tenancy::team(std::string_view name) const {
  for (const auto& t : teams)
    if (t.name == name) return &t;
  return nullptr;
}

const team_config* tenancy::team_by_key(std::string_view presented) const {
  if (presented.empty()) return nullptr;
  auto it = by_hash_.find(key_hash(presented));
  return it == by_hash_.end() ? nullptr : &teams[it->second];
}

void tenancy::index() {
  by_hash_.clear();
  for (const auto& k : keys)
    for (std::size_t i = 0; i < teams.size(); ++i)
      if (teams[i].name == k.team) by_hash_[k.hash] = i;
}

store::store(std::unique_ptr<db> d, std::string path, std::string ledger)
    : db_(std::move(d)), path_(std::move(path)), ledger_(std::move(ledger)) {}

store::~store() = default;

std::variant<std::unique_ptr<store>, std::string> store::open(const std::string& path, const std::string& ledger) {
  auto opened = is_postgres_uri(path) ? open_postgres(path) : open_sqlite(path);
  if (auto* e = std::get_if<std::string>(&opened)) return *e;
  std::unique_ptr<store> s(new store(std::move(std::get<std::unique_ptr<db>>(opened)), path, ledger));
  if (auto e = s->db_->lock_migrations()) return "store " + redacted_store_path(path) + ": " + *e;
  auto e = s->migrate();
  s->db_->unlock_migrations();
  if (e) return "store " + redacted_store_path(path) + ": " + *e;
  return s;
}

std::string redacted_store_path(const std::string& path) {
  if (!is_postgres_uri(path)) return path;
  // postgresql://user:secret@host/db -> postgresql://user@host/db; no password leaves.
  const auto scheme = path.find("://") + 3;
  const auto at = path.find('@', scheme);
  if (at == std::string::npos) return path.substr(0, path.find('?'));
  const auto colon = path.find(':', scheme);
  std::string out = colon != std::string::npos && colon < at ? path.substr(0, colon) + path.substr(at) : path;
  return out.substr(0, out.find('?'));
}

bool store::shared() const { return db_->kind() == db_kind::postgres; }

std::optional<std::string> store::exec(const char* sql) { return db_->exec(sql); }

int store::schema_version() { return db_->schema_version(); }

std::optional<std::string> store::migrate() {
  const int have = schema_version();
  if (have < 0) return std::string("cannot read the schema version");
  if (have > kSchemaVersion)
    return "schema version " + std::to_string(have) + " is newer than this kiln (" + std::to_string(kSchemaVersion) + ")";
  for (int v = have + 1; v <= kSchemaVersion; ++v) {
    const std::string sql = std::string("BEGIN;") + kMigrations[v - 1] + db_->schema_version_sql(v) + "COMMIT;";
    if (auto e = exec(sql.c_str())) {
      exec("ROLLBACK;");
      return "migration to version " + std::to_string(v) + " failed: " + *e;
    }
  }
  return std::nullopt;
}

bool store::empty() {
  statement st(*db_, "SELECT COUNT(*) FROM teams");
  return !st.row() || st.integer(0) == 0;
}

std::optional<std::string> store::seed(const kiln_config& cfg) {
  return in_transaction(*db_, [&]() -> std::optional<std::string> {
    for (const auto& t : cfg.teams) {
      if (auto e = add_team(t.name, t.name, t.max_priority)) return e;
      if (auto id = add_key(t.name, t.api_key); id.index() == 1) return std::get<1>(id);
      for (const auto& l : t.limits)
        if (auto e = put_limit(t.name, l)) return e;
    }
    return std::nullopt;
  });
}

tenancy store::load_tenancy() {
  tenancy out;
  statement teams(*db_, "SELECT team, max_priority FROM teams ORDER BY rowid");
  while (teams.row()) {
    team_config t;
    t.name = teams.text(0);
    t.max_priority = engine::parse_priority(teams.text(1)).value_or(engine::priority::interactive);
    out.teams.push_back(std::move(t));
  }
  statement limits(*db_,
                   "SELECT team, model, tokens_per_minute, burst, max_concurrency, guaranteed_share FROM team_limits");
  while (limits.row()) {
    for (auto& t : out.teams) {
      if (t.name != limits.text(0)) continue;
      t.limits.push_back({limits.text(1), limits.real(2), limits.real(3), static_cast<int>(limits.integer(4)),
                          limits.real(5)});
    }
  }
  statement keys(*db_, "SELECT key_id, team, key_hash FROM api_keys WHERE revoked_at IS NULL");
  while (keys.row()) out.keys.push_back({keys.text(0), keys.text(1), keys.text(2)});
  out.index();
  return out;
}

std::optional<std::string> store::add_team(const std::string& team, const std::string& name, engine::priority max_priority) {
  return statement(*db_, "INSERT INTO teams(team, name, max_priority) VALUES(?, ?, ?)")
      .bind(1, team)
      .bind(2, name)
      .bind(3, std::string(engine::to_string(max_priority)))
      .run();
}

std::variant<std::string, std::string> store::add_key(const std::string& team, const std::string& key) {
  const std::string hash = key_hash(key);
  const std::string id = "key_" + hash.substr(0, 12);  // names the key without revealing it
  if (auto e = statement(*db_, "INSERT INTO api_keys(key_id, team, key_hash, created_at) VALUES(?, ?, ?, ?)")
                   .bind(1, id)
                   .bind(2, team)
                   .bind(3, hash)
                   .bind(4, unix_now())
                   .run())
    return std::variant<std::string, std::string>(std::in_place_index<1>, *e);
  return std::variant<std::string, std::string>(std::in_place_index<0>, id);
}

bool store::revoke_key(const std::string& team, const std::string& key_id) {
  statement st(*db_, "UPDATE api_keys SET revoked_at = ? WHERE team = ? AND key_id = ? AND revoked_at IS NULL");
  st.bind(1, unix_now()).bind(2, team).bind(3, key_id);
  return !st.run() && db_->changes() == 1;
}

std::optional<std::string> store::put_limit(const std::string& team, const team_limit& l) {
  return statement(*db_,
                   "INSERT INTO team_limits(team, model, tokens_per_minute, burst, max_concurrency, guaranteed_share) "
                   "VALUES(?, ?, ?, ?, ?, ?) ON CONFLICT(team, model) DO UPDATE SET "
                   "tokens_per_minute = excluded.tokens_per_minute, burst = excluded.burst, "
                   "max_concurrency = excluded.max_concurrency, guaranteed_share = excluded.guaranteed_share")
      .bind(1, team)
      .bind(2, l.model)
      .bind(3, l.tokens_per_minute)
      .bind(4, l.burst)
      .bind(5, static_cast<std::int64_t>(l.max_concurrency))
      .bind(6, l.guaranteed_share)
      .run();
}

namespace {

std::optional<std::string> insert_usage(db& d, const std::vector<usage_row>& rows) {
  for (const auto& r : rows) {
    if (auto e = statement(d,
                           "INSERT INTO usage(team, model, version, minute, prompt_tokens, cached_tokens, output_tokens, "
                           "requests, shed) VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?) "
                           "ON CONFLICT(team, model, version, minute) DO UPDATE SET "
                           "prompt_tokens = usage.prompt_tokens + excluded.prompt_tokens, "
                           "cached_tokens = usage.cached_tokens + excluded.cached_tokens, "
                           "output_tokens = usage.output_tokens + excluded.output_tokens, "
                           "requests = usage.requests + excluded.requests, shed = usage.shed + excluded.shed")
                     .bind(1, r.team)
                     .bind(2, r.model)
                     .bind(3, r.version)
                     .bind(4, r.minute)
                     .bind(5, r.prompt_tokens)
                     .bind(6, r.cached_tokens)
                     .bind(7, r.output_tokens)
                     .bind(8, r.requests)
                     .bind(9, r.shed)
                     .run())
      return e;
  }
  return std::nullopt;
}

std::optional<std::string> raise_watermark(db& d, const std::string& ledger, std::uint64_t through_seq) {
  return statement(d,
                   "INSERT INTO meter_ledgers(ledger, folded_seq) VALUES(?, ?) ON CONFLICT(ledger) DO UPDATE SET "
                   "folded_seq = max(meter_ledgers.folded_seq, excluded.folded_seq)")
      .bind(1, ledger)
      .bind(2, static_cast<std::int64_t>(through_seq))
      .run();
}

std::uint64_t watermark_of(db& d, const std::string& ledger) {
  statement st(d, "SELECT folded_seq FROM meter_ledgers WHERE ledger = ?");
  st.bind(1, ledger);
  return st.row() ? static_cast<std::uint64_t>(st.integer(0)) : 0;
}

}  // namespace

std::uint64_t store::folded_seq() { return watermark_of(*db_, ledger_); }

std::optional<std::string> store::add_usage(const std::vector<usage_row>& rows, std::uint64_t through_seq) {
  return in_transaction(*db_, [&]() -> std::optional<std::string> {
    if (through_seq > 0)
      if (auto e = raise_watermark(*db_, ledger_, through_seq)) return e;
    return insert_usage(*db_, rows);
  });
}

std::variant<usage_folded, std::string> store::fold_usage(const std::string& ledger, std::uint64_t from_seq,
                                                           std::uint64_t through_seq, const std::vector<usage_record>& records) {
  if (from_seq == 0 || through_seq < from_seq) return std::string("a fold needs records 1 <= from_seq <= through_seq");
  const std::string& name = ledger.empty() ? ledger_ : ledger;
  usage_folded out;
  auto err = in_transaction(*db_, [&]() -> std::optional<std::string> {
    out.watermark = watermark_of(*db_, name);
    if (out.watermark >= from_seq) return std::nullopt;  // held already, wholly or in part
    if (auto e = raise_watermark(*db_, name, through_seq)) return e;
    out.watermark = through_seq;
    out.applied = true;
    // Each request once: a record whose id is metered already (by any ledger) is skipped.
    std::vector<usage_record> first;
    std::int64_t latest = 0;
    for (const auto& r : records) {
      const auto origin = static_cast<std::int64_t>(r.id_origin), id = static_cast<std::int64_t>(r.id_seq);
      if (auto e = statement(*db_, "INSERT INTO metered_ids(id_origin, id_seq, minute, ledger, seq) VALUES(?, ?, ?, ?, ?) "
                                   "ON CONFLICT DO NOTHING")
                       .bind(1, origin)
                       .bind(2, id)
                       .bind(3, r.minute)
                       .bind(4, name)
                       .bind(5, static_cast<std::int64_t>(r.seq))
                       .run())
        return e;
      statement who(*db_, "SELECT ledger, seq FROM metered_ids WHERE id_origin = ? AND id_seq = ?");
      who.bind(1, origin).bind(2, id);
      if (!who.row()) return std::string("cannot read the metered request ids");
      if (who.text(0) == name && who.integer(1) == static_cast<std::int64_t>(r.seq)) first.push_back(r);
      else ++out.duplicates;
      latest = std::max(latest, r.minute);
    }
    if (auto e = statement(*db_, "DELETE FROM metered_ids WHERE minute < ?").bind(1, latest - kMeteredIdsMinutes).run())
      return e;
    return insert_usage(*db_, fold(first));
  });
  if (err) return *err;
  return out;
}

std::vector<usage_row> store::usage(const std::string& team, const std::string& model, std::int64_t from_minute,
                                    std::int64_t to_minute) {
  statement st(*db_,
               "SELECT team, model, version, minute, prompt_tokens, cached_tokens, output_tokens, requests, shed "
               "FROM usage WHERE team = ? AND (? = '' OR model = ?) AND minute BETWEEN ? AND ? "
               "ORDER BY minute, model, version");
  st.bind(1, team).bind(2, model).bind(3, model).bind(4, from_minute).bind(5, to_minute);
  std::vector<usage_row> out;
  while (st.row())
    out.push_back({st.text(0), st.text(1), st.text(2), st.integer(3), st.integer(4), st.integer(5), st.integer(6),
                   st.integer(7), st.integer(8)});
  return out;
}

std::optional<std::string> store::put_region_use(const std::string& region, const std::vector<region_use_row>& rows) {
  const std::int64_t now = unix_now();
  return in_transaction(*db_, [&]() -> std::optional<std::string> {
    for (const auto& r : rows) {
      if (auto e = statement(*db_,
                             "INSERT INTO region_use(region, team, model, tokens_per_minute, at) VALUES(?, ?, ?, ?, ?) "
                             "ON CONFLICT(region, team, model) DO UPDATE SET "
                             "tokens_per_minute = excluded.tokens_per_minute, at = excluded.at")
                       .bind(1, region)
                       .bind(2, r.team)
                       .bind(3, r.model)
                       .bind(4, r.tokens_per_minute)
                       .bind(5, now)
                       .run())
        return e;
    }
    return std::nullopt;
  });
}

std::vector<region_use_row> store::region_use(std::int64_t within_s) {
  statement st(*db_,
               "SELECT region, team, model, tokens_per_minute, at FROM region_use WHERE at >= ? "
               "ORDER BY region, team, model");
  st.bind(1, unix_now() - within_s);
  std::vector<region_use_row> out;
  while (st.row()) out.push_back({st.text(0), st.text(1), st.text(2), st.real(3), st.integer(4)});
  return out;
}

}  // namespace kiln::config
