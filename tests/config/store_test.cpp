// The control-plane store: schema and migrations, WAL, keys kept as hashes, seeding from
// config, limits, usage rows that add up, and a store that outlives its process.
#include <doctest/doctest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include <sqlite3.h>

#include "config/store.hpp"
#include "tests/support/teams_config.hpp"

using namespace kiln::config;
using kiln::test::teams_config;

namespace {

struct temp_store {
  std::string path = (std::filesystem::temp_directory_path() / ("kiln-store-" + std::to_string(::getpid()) + "-" +
                                                               std::to_string(reinterpret_cast<std::uintptr_t>(this)) + ".db"))
                         .string();
  ~temp_store() {
    for (const char* ext : {"", "-wal", "-shm"}) std::filesystem::remove(path + ext);
  }
  std::unique_ptr<store> open() {
    auto r = store::open(path);
    REQUIRE(std::holds_alternative<std::unique_ptr<store>>(r));
    return std::move(std::get<std::unique_ptr<store>>(r));
  }
};

std::string sql_one(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  sqlite3_open(path.c_str(), &db);
  sqlite3_stmt* st = nullptr;
  sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr);
  std::string out;
  if (sqlite3_step(st) == SQLITE_ROW) {
    const auto* t = sqlite3_column_text(st, 0);
    out = t ? reinterpret_cast<const char*>(t) : "";
  }
  sqlite3_finalize(st);
  sqlite3_close(db);
  return out;
}

}  // namespace

TEST_CASE("store: a new file gets the schema at the current version, in WAL mode") {
  temp_store t;
  auto s = t.open();
  CHECK(s->schema_version() == store::kSchemaVersion);
  CHECK(s->empty());
  CHECK(s->folded_seq() == 0);
  CHECK(sql_one(t.path, "PRAGMA journal_mode") == "wal");
  for (const char* table : {"models", "model_versions", "pools", "replicas", "teams", "api_keys", "team_limits", "usage",
                            "rollouts", "meter_ledgers"}) {
    CAPTURE(table);
    CHECK(sql_one(t.path, std::string("SELECT name FROM sqlite_master WHERE type='table' AND name='") + table + "'") == table);
  }
  // Opening again migrates nothing and keeps the version.
  s.reset();
  CHECK(t.open()->schema_version() == store::kSchemaVersion);
}

TEST_CASE("store: a store written by a newer kiln is refused with a clear line") {
  temp_store t;
  t.open();
  sqlite3* db = nullptr;
  sqlite3_open(t.path.c_str(), &db);
  sqlite3_exec(db, "PRAGMA user_version=99", nullptr, nullptr, nullptr);
  sqlite3_close(db);
  auto r = store::open(t.path);
  REQUIRE(std::holds_alternative<std::string>(r));
  CHECK(std::get<std::string>(r).find("schema version 99 is newer") != std::string::npos);
}

TEST_CASE("store: seeded from config, keys are kept as hashes only; the store is the source of truth after") {
  temp_store t;
  const kiln_config cfg = teams_config();
  {
    auto s = t.open();
    REQUIRE_FALSE(s->seed(cfg));
    CHECK_FALSE(s->empty());
  }
  // Not one byte of a key in clear, in the file or its WAL.
  for (const char* ext : {"", "-wal"}) {
    std::ifstream f(t.path + ext, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    CHECK(bytes.find("secret-search-key") == std::string::npos);
    CHECK(bytes.find("secret-batch-key") == std::string::npos);
  }
  CHECK(sql_one(t.path, "SELECT key_hash FROM api_keys WHERE team='search'") == key_hash("secret-search-key"));
  auto s = t.open();  // a new process: what the store says
  const tenancy ten = s->load_tenancy();
  REQUIRE(ten.teams.size() == 2);
  const team_config* search = ten.team_by_key("secret-search-key");
  REQUIRE(search);
  CHECK(search->name == "search");
  CHECK(search->api_key.empty());
  REQUIRE(search->limit_for("m"));
  CHECK(search->limit_for("m")->tokens_per_minute == 6000);
  CHECK(search->limit_for("m")->max_concurrency == 4);
  CHECK(search->limit_for("m")->guaranteed_share == doctest::Approx(0.5));
  CHECK(ten.team_by_key("secret-batch-key")->max_priority == kiln::engine::priority::batch);
  CHECK(ten.team_by_key("wrong") == nullptr);
  CHECK(ten.team_by_key("") == nullptr);
}

TEST_CASE("store: keys added and revoked, limits replaced, usage rows add up per minute") {
  temp_store t;
  auto s = t.open();
  REQUIRE_FALSE(s->seed(teams_config()));
  const std::string key = new_api_key();
  CHECK(key.rfind("kiln-", 0) == 0);
  CHECK(key.size() == 5 + 48);
  auto id = s->add_key("search", key);
  REQUIRE(id.index() == 0);
  CHECK(s->load_tenancy().team_by_key(key)->name == "search");
  CHECK_FALSE(s->revoke_key("batchers", std::get<0>(id)));  // another team's key
  CHECK(s->revoke_key("search", std::get<0>(id)));
  CHECK_FALSE(s->revoke_key("search", std::get<0>(id)));  // already revoked
  CHECK(s->load_tenancy().team_by_key(key) == nullptr);
  CHECK(s->load_tenancy().team_by_key("secret-search-key") != nullptr);  // the other key lives on
  REQUIRE_FALSE(s->put_limit("search", {"m", 120, 60, 2, 0.25}));
  const tenancy after = s->load_tenancy();
  const auto* l = after.team("search")->limit_for("m");
  CHECK(l->tokens_per_minute == 120);
  CHECK(l->burst == 60);
  CHECK(l->max_concurrency == 2);
  CHECK(s->put_limit("nobody", {"m", 1, 0, 0, 0}).has_value());  // no such team
  REQUIRE_FALSE(s->add_usage({{"search", "m", "v", 100, 10, 2, 5, 1, 0}, {"search", "m", "v", 100, 20, 0, 7, 1, 1},
                              {"search", "m", "v", 101, 1, 0, 1, 1, 0}, {"batchers", "m", "v", 100, 9, 9, 9, 9, 9}}));
  const auto rows = s->usage("search", "", 100, 101);
  REQUIRE(rows.size() == 2);
  CHECK(rows[0].minute == 100);
  CHECK(rows[0].prompt_tokens == 30);
  CHECK(rows[0].cached_tokens == 2);
  CHECK(rows[0].output_tokens == 12);
  CHECK(rows[0].requests == 2);
  CHECK(rows[0].shed == 1);
  CHECK(rows[1].minute == 101);
  CHECK(s->usage("search", "", 101, 101).size() == 1);
  CHECK(s->usage("search", "other", 0, 1000).empty());
  CHECK(s->usage("nobody", "", 0, 1000).empty());
}

#include "config/usage_wal.hpp"

TEST_CASE("store: a version 1 store migrates to the current version, keeping its rows") {
  temp_store t;
  {
    sqlite3* db = nullptr;
    sqlite3_open(t.path.c_str(), &db);
    // What version 1 made (the tables later versions change), one team in it.
    sqlite3_exec(db,
                 "CREATE TABLE teams(team TEXT PRIMARY KEY, name TEXT, max_priority TEXT NOT NULL DEFAULT 'interactive');"
                 "CREATE TABLE models(model TEXT PRIMARY KEY, live_version TEXT, canary_version TEXT, canary_percent REAL);"
                 "CREATE TABLE model_versions(model TEXT, version TEXT, weights_uri TEXT, weights_hash TEXT,"
                 " tokenizer_hash TEXT, chat_template_hash TEXT, precision TEXT, gpus_per_replica INTEGER,"
                 " engine_config TEXT, eval_report_uri TEXT, load_test_tokens_per_s REAL,"
                 " load_test_tokens_in_flight REAL, status TEXT, PRIMARY KEY(model, version));"
                 "CREATE TABLE rollouts(model TEXT, version TEXT, stage TEXT, percent REAL, started_at INTEGER,"
                 " guard_metrics TEXT, decision TEXT);"
                 "CREATE TABLE pools(model TEXT, version TEXT, region TEXT, min_replicas INTEGER, max_replicas INTEGER,"
                 " PRIMARY KEY(model, version, region));"
                 "INSERT INTO teams VALUES('old','old','interactive');"
                 "INSERT INTO pools VALUES('chat-7b','v1','local',2,6);"
                 "INSERT INTO models VALUES('chat-7b','v1',NULL,NULL); PRAGMA user_version=1;",
                 nullptr, nullptr, nullptr);
    sqlite3_close(db);
  }
  auto r = store::open(t.path);
  // v2 adds the meter's watermark, v3 the registry's columns and tables, v4 warm replicas, v5
  // one watermark per ledger; the rows stay.
  REQUIRE(std::holds_alternative<std::unique_ptr<store>>(r));
  auto& s = std::get<std::unique_ptr<store>>(r);
  CHECK(s->schema_version() == store::kSchemaVersion);
  CHECK(s->folded_seq() == 0);
  const auto pl = s->pool_limits_of("chat-7b", "v1", "local");
  REQUIRE(pl.has_value());
  CHECK(pl->min_replicas == 2);
  CHECK(pl->max_replicas == 6);
  CHECK(pl->warm_replicas == 0);
  CHECK(sql_one(t.path, "SELECT team FROM teams") == "old");
  auto routes = s->routes();
  REQUIRE(routes.size() == 1);
  CHECK(routes[0].live == "v1");
  CHECK(routes[0].shadow.empty());
}

TEST_CASE("store: usage rows and the meter's watermark move together") {
  temp_store t;
  auto s = t.open();
  REQUIRE_FALSE(s->seed(teams_config()));
  REQUIRE_FALSE(s->add_usage({{"search", "m", "v", 5, 1, 0, 2, 1, 0}}, 40));
  CHECK(s->folded_seq() == 40);
  REQUIRE_FALSE(s->add_usage({{"search", "m", "v", 5, 1, 0, 2, 1, 0}}, 30));  // never backwards
  CHECK(s->folded_seq() == 40);
  CHECK(s->usage("search", "", 0, 10)[0].requests == 2);
}

TEST_CASE("usage wal: records survive in segments; a torn tail is dropped; folding counts each request once") {
  temp_store t;
  const std::string prefix = t.path + ".usage";
  std::vector<usage_record> first = {{1, 7, 1, "search", "m", "v", 100, 10, 2, 5, 1, 0},
                                     {2, 7, 2, "search", "m", "v", 100, 20, 0, 7, 1, 0},
                                     {3, 7, 3, "assistant", "m", "v", 101, 0, 0, 0, 0, 1}};
  {
    usage_wal w(prefix);
    REQUIRE_FALSE(w.append(first));
    REQUIRE_FALSE(w.append({{4, 7, 4, "search", "m", "v", 101, 1, 0, 1, 1, 0}}));
  }
  usage_wal w(prefix);  // a new process
  auto all = w.read_all();
  REQUIRE(all.size() == 4);
  CHECK(all[1].prompt_tokens == 20);
  CHECK(all[3].seq == 4);
  // A crash mid-write leaves half a record at the end: it is dropped, the rest stand.
  const auto segs = w.segments();
  REQUIRE(segs.size() == 1);
  {
    std::ofstream torn(segs[0], std::ios::binary | std::ios::app);
    torn << "\x8c\xa3seq\x05";  // a map of 12 begun, not finished
  }
  CHECK(w.read_all().size() == 4);
  // New records go to a new segment; rotating closes it; removing folded segments leaves none.
  REQUIRE_FALSE(w.append({{5, 7, 5, "search", "m", "v", 102, 1, 0, 1, 1, 0}}));
  CHECK(w.segments().size() == 2);
  const auto closed = w.rotate();
  CHECK(closed.size() == 2);
  // The same request twice (a replay over its own records) counts once.
  auto twice = first;
  twice.push_back(first[0]);
  const auto rows = fold(twice);
  REQUIRE(rows.size() == 2);
  CHECK(rows[0].team == "assistant");
  CHECK(rows[0].shed == 1);
  CHECK(rows[1].requests == 2);
  CHECK(rows[1].prompt_tokens == 30);
  CHECK(rows[1].output_tokens == 12);
  w.remove(closed);
  CHECK(w.segments().empty());
}

TEST_CASE("usage wal: the watermark noted beside the log of a node whose store is remote") {
  temp_store t;
  const std::string mark = t.path + ".usage-folded";
  CHECK(read_watermark(mark) == 0);  // none noted yet
  CHECK(write_watermark(mark, 41));
  CHECK(read_watermark(mark) == 41);
  CHECK(write_watermark(mark, 18446744073709551615ull));
  CHECK(read_watermark(mark) == 18446744073709551615ull);
  CHECK_FALSE(write_watermark("/nonexistent-dir/kiln/mark", 3));
  std::filesystem::remove(mark);
}
