// The same store behaviour on both backends: a SQLite file and a real PostgreSQL server of
// the test's own (skipped, with the reason, where Debian's postgresql package is missing).
// Schema and migrations, tenancy, keys, limits, usage with one watermark per ledger, the
// registry, routes, rollouts and pool limits; two processes migrating one database at once.
#include <doctest/doctest.h>

#include <unistd.h>

#include <filesystem>
#include <functional>
#include <thread>

#include "config/db.hpp"
#include "config/region_shares.hpp"
#include "config/store.hpp"
#include "tests/support/pg_server.hpp"
#include "tests/support/teams_config.hpp"

using namespace kiln::config;

namespace {

using opener = std::function<std::unique_ptr<store>(const std::string& ledger)>;

std::unique_ptr<store> must_open(const std::string& path, const std::string& ledger) {
  auto r = store::open(path, ledger);
  if (auto* e = std::get_if<std::string>(&r)) FAIL("cannot open the store: " << *e);
  return std::move(std::get<std::unique_ptr<store>>(r));
}

// Everything the store does, against whichever backend `open` reaches.
void exercise(const opener& open) {
  auto s = open("");
  CHECK(s->schema_version() == store::kSchemaVersion);
  CHECK(s->empty());
  CHECK(s->folded_seq() == 0);
  REQUIRE_FALSE(s->seed(kiln::test::teams_config()));
  CHECK_FALSE(s->empty());
  // Tenancy in the order teams were made; keys by hash; limits with their fractions.
  auto t = s->load_tenancy();
  REQUIRE(t.teams.size() == 2);
  CHECK(t.teams[0].name == "search");
  CHECK(t.teams[1].name == "batchers");
  CHECK(t.team_by_key("secret-batch-key")->max_priority == kiln::engine::priority::batch);
  CHECK(t.team("search")->limit_for("m")->tokens_per_minute == 6000);
  CHECK(t.team("search")->limit_for("m")->guaranteed_share == 0.5);
  CHECK(s->add_team("search", "again", kiln::engine::priority::standard).has_value());  // one team per name
  const std::string key = new_api_key();
  auto id = s->add_key("search", key);
  REQUIRE(id.index() == 0);
  CHECK(s->load_tenancy().team_by_key(key)->name == "search");
  CHECK_FALSE(s->revoke_key("batchers", std::get<0>(id)));
  CHECK(s->revoke_key("search", std::get<0>(id)));
  CHECK_FALSE(s->revoke_key("search", std::get<0>(id)));
  CHECK(s->load_tenancy().team_by_key(key) == nullptr);
  REQUIRE_FALSE(s->put_limit("search", {"m", 120.5, 60, 2, 0.375}));
  CHECK(s->load_tenancy().team("search")->limit_for("m")->burst == 60);
  CHECK(s->load_tenancy().team("search")->limit_for("m")->tokens_per_minute == 120.5);
  CHECK(s->load_tenancy().team("search")->limit_for("m")->guaranteed_share == 0.375);
  CHECK(s->put_limit("nobody", {"m", 1, 0, 0, 0}).has_value());  // no such team: refused by the schema

  // Usage adds up per minute; the watermark moves with the rows, never backwards, per ledger.
  REQUIRE_FALSE(s->add_usage({{"search", "m", "v", 100, 10, 2, 5, 1, 0}, {"search", "m", "v", 100, 20, 0, 7, 1, 1}}, 40));
  REQUIRE_FALSE(s->add_usage({{"search", "m", "v", 100, 1, 1, 1, 1, 0}}, 30));
  CHECK(s->folded_seq() == 40);
  auto rows = s->usage("search", "", 0, 1000);
  REQUIRE(rows.size() == 1);
  CHECK(rows[0].prompt_tokens == 31);
  CHECK(rows[0].requests == 3);
  CHECK(rows[0].shed == 1);
  CHECK(s->usage("search", "other", 0, 1000).empty());
  CHECK(s->usage("search", "m", 101, 1000).empty());
  // Past 2^32 tokens a minute still adds up.
  REQUIRE_FALSE(s->add_usage({{"batchers", "m", "v", 7, 5000000000, 0, 0, 1, 0}, {"batchers", "m", "v", 7, 5000000000, 0, 0, 1, 0}}));
  CHECK(s->usage("batchers", "m", 7, 7)[0].prompt_tokens == 10000000000);
  {
    auto other_node = open("region-b");
    CHECK(other_node->folded_seq() == 0);
    REQUIRE_FALSE(other_node->add_usage({{"search", "m", "v", 100, 1, 0, 0, 1, 0}}, 7));
    CHECK(other_node->folded_seq() == 7);
  }
  CHECK(s->folded_seq() == 40);
  CHECK(s->usage("search", "m", 100, 100)[0].requests == 4);  // both ledgers' rows in one table
  // A remote node's folds go to its own ledger, each once: a retry, or a fold overlapping one
  // held, changes nothing and answers the watermark the meter drops records by.
  {
    auto records = [](std::uint64_t from, std::uint64_t through, std::uint64_t origin) {
      std::vector<usage_record> out;
      for (auto seq = from; seq <= through; ++seq) out.push_back({seq, origin, seq, "search", "m", "v", 200, 1, 0, 1, 1, 0});
      return out;
    };
    auto folded = [&](const std::string& ledger, std::uint64_t from, std::uint64_t through, std::uint64_t origin) {
      auto r = s->fold_usage(ledger, from, through, records(from, through, origin));
      REQUIRE(std::holds_alternative<usage_folded>(r));
      return std::get<usage_folded>(r);
    };
    auto first = folded("router-b", 1, 5, 77);
    CHECK(first.applied);
    CHECK(first.watermark == 5);
    CHECK(first.duplicates == 0);
    auto again = folded("router-b", 1, 5, 77);  // its answer was lost: the meter sends it again
    CHECK_FALSE(again.applied);
    CHECK(again.watermark == 5);
    auto overlap = folded("router-b", 3, 9, 77);  // records 3..5 are held: refused whole, watermark 5
    CHECK_FALSE(overlap.applied);
    CHECK(overlap.watermark == 5);
    auto rest = folded("router-b", 6, 9, 77);
    CHECK(rest.applied);
    CHECK(rest.watermark == 9);
    CHECK(s->usage("search", "m", 200, 200)[0].requests == 9);  // 1..9 once each
    // Requests 8..12 of the same origin metered by another node (a front that saw region
    // b lost): 8 and 9 are b's already and count once; 10..12 are new.
    auto front = folded("front-a", 1, 5, 0);  // ids 1..5 of origin 0: other requests
    CHECK(front.duplicates == 0);
    auto seen_lost = records(8, 12, 77);
    for (std::size_t i = 0; i < seen_lost.size(); ++i) seen_lost[i].seq = 6 + i;  // the front's own numbering
    auto lost = s->fold_usage("front-a", 6, 10, seen_lost);
    REQUIRE(std::holds_alternative<usage_folded>(lost));
    CHECK(std::get<usage_folded>(lost).applied);
    CHECK(std::get<usage_folded>(lost).duplicates == 2);
    CHECK(s->usage("search", "m", 200, 200)[0].requests == 9 + 5 + 3);
    CHECK(s->folded_seq() == 40);  // the store's own ledger is apart
    CHECK(std::holds_alternative<usage_folded>(s->fold_usage("", 41, 41, {})));
    CHECK(s->folded_seq() == 41);
    CHECK(std::holds_alternative<std::string>(s->fold_usage("router-b", 0, 3, {})));   // records start at 1
    CHECK(std::holds_alternative<std::string>(s->fold_usage("router-b", 12, 11, {})));  // from past through
  }

  // The registry: a version never changes; routes and decisions are kept.
  model_version v;
  v.model = "m";
  v.version = "v2";
  v.weights_uri = "http://control:8180/artifacts/m-v2";
  v.weights_hash = std::string(64, 'a');
  v.tokenizer_hash = std::string(64, 'b');
  v.engine_config = R"({"replicas":3})";
  v.files = {{"config.json", std::string(64, 'c')}, {"model.safetensors", std::string(64, 'd')}};
  auto first = s->register_version(v);
  CHECK(first.created);
  CHECK(first.error.empty());
  CHECK_FALSE(s->register_version(v).created);
  auto other = v;
  other.weights_hash = std::string(64, 'e');
  CHECK_FALSE(s->register_version(other).conflict.empty());
  auto back = s->version("m", "v2");
  REQUIRE(back);
  CHECK(back->weights_uri == v.weights_uri);
  CHECK(back->files.size() == 2);
  CHECK(back->files[1].file == "model.safetensors");
  CHECK_FALSE(s->set_load_test("m", "v2", 1632.25, 20000));
  CHECK(s->version("m", "v2")->status == "gated");
  CHECK(s->version("m", "v2")->load_test_tokens_per_s == 1632.25);
  CHECK(s->versions("m").size() == 1);
  model_route r{"m", "v1", "v2", 12.5, "", 0, "v0", 1234};
  CHECK_FALSE(s->put_route(r));
  r.canary_percent = 50;
  CHECK_FALSE(s->put_route(r));
  REQUIRE(s->routes().size() == 1);
  CHECK(s->routes()[0].canary_percent == 50);
  CHECK(s->routes()[0].previous_until == 1234);
  rollout_row row;
  row.model = "m";
  row.version = "v2";
  row.stage = "canary";
  row.percent = 50;
  row.decision = "advance";
  row.guard_metrics = R"({"p95":"ok"})";
  const auto s1 = s->add_rollout(row);
  const auto s2 = s->add_rollout(row);
  CHECK(s1 > 0);
  CHECK(s2 == s1 + 1);
  row.stage = "sideways";  // not a stage: refused by the schema
  CHECK(s->add_rollout(row) == 0);
  CHECK(s->rollouts("m").size() == 2);
  CHECK(s->rollouts("m")[1].guard_metrics == R"({"p95":"ok"})");
  REQUIRE_FALSE(s->put_pool_limits({"m", "v2", "east", 1, 8, 2}));
  REQUIRE_FALSE(s->put_pool_limits({"m", "v2", "east", 2, 9, 1}));
  CHECK(s->pool_limits_of("m", "v2", "east")->max_replicas == 9);
  CHECK_FALSE(s->pool_limits_of("m", "v2", "west"));
  CHECK(s->all_pool_limits().size() == 1);
  // A remote pool's upstreams: none stored until changed; the whole list replaces the last.
  CHECK_FALSE(s->pool_upstreams_of("m", "v2", "east"));
  REQUIRE_FALSE(s->put_pool_upstreams("m", "v2", "east", {"http://a:1/v1", "http://b:2/v1"}));
  REQUIRE_FALSE(s->put_pool_upstreams("m", "v2", "east", {"http://b:2/v1", "http://c/v1"}));
  CHECK(*s->pool_upstreams_of("m", "v2", "east") == std::vector<std::string>{"http://b:2/v1", "http://c/v1"});
  CHECK_FALSE(s->pool_upstreams_of("m", "v2", "west"));
  CHECK(s->put_pool_upstreams("m", "v2", "east", {"http://a\n/v1"}));  // refused: a line break
  CHECK(s->pool_upstreams_of("m", "v2", "east")->size() == 2);

  // Limits across regions: each region's latest row per (team, model); old rows age out.
  REQUIRE_FALSE(s->put_region_use("east", {{"", "search", "m", 1500.5, 0}, {"", "batchers", "m", 0, 0}}));
  REQUIRE_FALSE(s->put_region_use("west", {{"", "search", "m", 10, 0}}));
  REQUIRE_FALSE(s->put_region_use("west", {{"", "search", "m", 20, 0}}));  // replaces, not adds
  auto use = s->region_use(30);
  REQUIRE(use.size() == 3);
  CHECK(use[0].region == "east");
  CHECK(use[0].team == "batchers");
  CHECK(use[1].tokens_per_minute == 1500.5);
  CHECK(use[2].region == "west");
  CHECK(use[2].tokens_per_minute == 20);
  CHECK(use[2].at > 1700000000);
  CHECK(s->region_use(-3600).empty());  // "within the last -1 hours": none that fresh

  // Files and batches: a team's own, newest first; a batch's state replaced as it runs.
  REQUIRE_FALSE(s->put_file({"file-a", "search", "batch", "in.jsonl", 120, 100, "/f/a"}));
  REQUIRE_FALSE(s->put_file({"file-b", "search", "batch", "in2.jsonl", 7, 200, "/f/b"}));
  REQUIRE_FALSE(s->put_file({"file-c", "batchers", "batch", "x.jsonl", 1, 150, "/f/c"}));
  CHECK(s->file("file-a")->bytes == 120);
  CHECK_FALSE(s->file("file-z"));
  REQUIRE(s->files("search").size() == 2);
  CHECK(s->files("search")[0].id == "file-b");
  CHECK(s->delete_file("file-b"));
  CHECK_FALSE(s->delete_file("file-b"));
  CHECK(s->files("search").size() == 1);
  for (int i = 0; i < 3; ++i) {
    batch_row b;
    b.id = "batch_" + std::to_string(i);
    b.team = i == 2 ? "batchers" : "search";
    b.model = "m";
    b.endpoint = "/v1/chat/completions";
    b.input_file_id = "file-a";
    b.completion_window = "24h";
    b.metadata = R"({"k":"v"})";
    b.input_path = "/f/a";
    b.node = "n1";
    b.created_at = 1000 + i;
    b.total = 10;
    REQUIRE_FALSE(s->put_batch(b));
  }
  auto b0 = *s->batch("batch_0");
  CHECK(b0.status == "validating");
  CHECK(b0.metadata == R"({"k":"v"})");
  CHECK(b0.node == "n1");
  b0.status = "completed";
  b0.completed = 9;
  b0.failed = 1;
  b0.output_file_id = "file-out";
  b0.completed_at = 2000;
  REQUIRE_FALSE(s->put_batch(b0));
  CHECK(s->batch("batch_0")->completed == 9);
  CHECK(s->batch("batch_0")->output_file_id == "file-out");
  CHECK(s->batch("batch_0")->total == 10);
  REQUIRE(s->batches("search", "", 10).size() == 2);
  CHECK(s->batches("search", "", 10)[0].id == "batch_1");  // newest first
  CHECK(s->batches("search", "batch_1", 10).size() == 1);   // after a cursor
  CHECK(s->batches("search", "", 1).size() == 1);
  CHECK(s->batches("", "", 10).size() == 3);  // every team's
  auto open_now = s->open_batches();
  REQUIRE(open_now.size() == 2);  // batch_0 ended
  CHECK(open_now[0].id == "batch_1");
  CHECK(open_now[1].id == "batch_2");

  // Another process (a reopen) sees all of it, migrating nothing.
  s.reset();
  auto again = open("");
  CHECK(again->schema_version() == store::kSchemaVersion);
  CHECK(again->folded_seq() == 41);
  CHECK(again->load_tenancy().teams.size() == 2);
  CHECK(again->rollouts("m").size() == 2);
}

}  // namespace

TEST_CASE("store backends: SQLite file") {
  const std::string path = (std::filesystem::temp_directory_path() / ("kiln-backends-" + std::to_string(::getpid()) + ".db")).string();
  exercise([&](const std::string& ledger) { return must_open(path, ledger); });
  for (const char* ext : {"", "-wal", "-shm"}) std::filesystem::remove(path + ext);
}

TEST_CASE("store backends: PostgreSQL server") {
  if (auto why = kiln::test::pg_server::unavailable(); !why.empty()) {
    MESSAGE("skipped: " << why);
    return;
  }
  kiln::test::pg_server pg;
  REQUIRE_MESSAGE(pg.error().empty(), pg.error());
  const std::string uri = pg.create_database("kiln_store");
  REQUIRE_MESSAGE(uri.rfind("postgresql://", 0) == 0, uri);
  exercise([&](const std::string& ledger) { return must_open(uri, ledger); });

  // The server restarts under an open store: the next statement finds a new connection; while
  // it is down, statements fail with the reason, and work again once it is back.
  {
    auto s = must_open(uri, "");
    REQUIRE(pg.restart().empty());
    CHECK(s->load_tenancy().teams.size() == 2);
    CHECK_FALSE(s->add_team("after-restart", "after-restart", kiln::engine::priority::standard));
    CHECK(s->load_tenancy().team("after-restart") != nullptr);
  }

  // Two nodes starting on a new database at once: one migrates, the other waits and finds
  // the schema current.
  const std::string fresh = pg.create_database("kiln_race");
  std::string e1, e2;
  auto open_one = [&](std::string& err) {
    auto r = store::open(fresh, "");
    if (auto* e = std::get_if<std::string>(&r)) err = *e;
  };
  std::thread a([&] { open_one(e1); });
  std::thread b([&] { open_one(e2); });
  a.join();
  b.join();
  CHECK(e1.empty());
  CHECK(e2.empty());
  CHECK(must_open(fresh, "")->schema_version() == store::kSchemaVersion);

  // A password never appears where a store path is printed; a server that is not there is a
  // clear error.
  CHECK(redacted_store_path("postgresql://kiln:s3cret@db:5432/kiln?sslmode=require") == "postgresql://kiln@db:5432/kiln");
  CHECK(redacted_store_path("/var/lib/kiln/kiln.db") == "/var/lib/kiln/kiln.db");
  auto gone = store::open("postgresql://kiln@127.0.0.1:1/kiln");
  REQUIRE(std::holds_alternative<std::string>(gone));
  CHECK(std::get<std::string>(gone).find("cannot connect to the PostgreSQL store") != std::string::npos);
}

TEST_CASE("store backends: the store's SQL in PostgreSQL's spelling") {
  CHECK(postgres_dialect("SELECT a FROM t WHERE x = ? AND y = '?' AND z = ?") ==
        "SELECT a FROM t WHERE x = $1 AND y = '?' AND z = $2");
  CHECK(postgres_dialect("CREATE TABLE r(seq INTEGER PRIMARY KEY AUTOINCREMENT, p REAL, n INTEGER, s TEXT)") ==
        "CREATE TABLE r(seq BIGSERIAL PRIMARY KEY, p DOUBLE PRECISION, n BIGINT, s TEXT)");
  CHECK(postgres_dialect("CREATE TABLE teams(team TEXT)") == "CREATE TABLE teams(seq BIGSERIAL, team TEXT)");
  CHECK(postgres_dialect("SELECT team FROM teams ORDER BY rowid") == "SELECT team FROM teams ORDER BY seq");
  CHECK(postgres_dialect("SET f = max(a.f, excluded.f), max_priority = 'max(' ") ==
        "SET f = GREATEST(a.f, excluded.f), max_priority = 'max(' ");
  CHECK(postgres_dialect("INSERT INTO x VALUES('it''s ?', ?)") == "INSERT INTO x VALUES('it''s ?', $1)");
  CHECK(is_postgres_uri("postgres://h/db"));
  CHECK(is_postgres_uri("postgresql://h/db"));
  CHECK_FALSE(is_postgres_uri("~/.kiln/kiln.db"));
}

TEST_CASE("region shares: a limit follows what each live region asked, with a floor, and adds up to 1") {
  tenancy t;
  team_config search;
  search.name = "search";
  search.limits.push_back({"m", 6000, 0, 0, 0});
  search.limits.push_back({"unlimited", 0, 0, 0, 0});
  t.teams.push_back(search);
  using rows = std::vector<region_use_row>;
  // Alone: whole (absent).
  CHECK(region_shares("a", rows{{"a", "search", "m", 500, 0}}, t).empty());
  CHECK(region_shares("a", rows{}, t).empty());
  // Two regions asking the same: half each.
  const rows even{{"a", "search", "m", 1000, 0}, {"b", "search", "m", 1000, 0}};
  CHECK(region_shares("a", even, t).at({"search", "m"}) == doctest::Approx(0.5));
  // 3:1 with a floor of 10% (600 tokens spread over two regions): (300 + 3000) / (600 + 4000).
  const rows skewed{{"a", "search", "m", 3000, 0}, {"b", "search", "m", 1000, 0}};
  const double a = region_shares("a", skewed, t).at({"search", "m"});
  const double b = region_shares("b", skewed, t).at({"search", "m"});
  CHECK(a == doctest::Approx(3300.0 / 4600));
  CHECK(a + b == doctest::Approx(1.0));
  // An idle region keeps its floor; nobody asking anything: an even split.
  const rows idle{{"a", "search", "m", 6000, 0}, {"b", "search", "m", 0, 0}};
  CHECK(region_shares("b", idle, t).at({"search", "m"}) == doctest::Approx(300.0 / 6600));
  const rows quiet{{"a", "search", "m", 0, 0}, {"b", "search", "m", 0, 0}, {"c", "search", "m", 0, 0}};
  CHECK(region_shares("c", quiet, t).at({"search", "m"}) == doctest::Approx(1.0 / 3));
  // A region not yet reported counts itself live; a pair without a limit, or an unknown team,
  // is never split; a negative report counts as nothing.
  CHECK(region_shares("c", even, t).at({"search", "m"}) == doctest::Approx(200.0 / 2600));
  CHECK(region_shares("a", rows{{"b", "search", "unlimited", 10, 0}, {"b", "nobody", "m", 10, 0}}, t).empty());
  CHECK(region_shares("a", rows{{"a", "search", "m", -50, 0}, {"b", "search", "m", 0, 0}}, t).at({"search", "m"}) ==
        doctest::Approx(0.5));
}
