// The store on one SQLite file (WAL mode; schema version in PRAGMA user_version).
#include <sqlite3.h>

#include <filesystem>

#include "config/db.hpp"

namespace kiln::config {

namespace {

class sqlite_cursor final : public db_cursor {
 public:
  sqlite_cursor(sqlite3* db, std::string_view sql) : db_(db) {
    if (sqlite3_prepare_v2(db, sql.data(), static_cast<int>(sql.size()), &st_, nullptr) != SQLITE_OK) {
      error_ = sqlite3_errmsg(db);
      st_ = nullptr;
    }
  }
  ~sqlite_cursor() override { sqlite3_finalize(st_); }
  void bind_text(int i, const std::string& v) override {
    sqlite3_bind_text(st_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
  }
  void bind_int(int i, std::int64_t v) override { sqlite3_bind_int64(st_, i, v); }
  void bind_real(int i, double v) override { sqlite3_bind_double(st_, i, v); }
  bool row() override { return st_ && sqlite3_step(st_) == SQLITE_ROW; }
  std::optional<std::string> run() override {
    if (!st_) return error_;
    const int rc = sqlite3_step(st_);
    if (rc != SQLITE_DONE && rc != SQLITE_ROW) return std::string(sqlite3_errmsg(db_));
    return std::nullopt;
  }
  std::string text(int c) const override {
    const auto* p = sqlite3_column_text(st_, c);
    return p ? std::string(reinterpret_cast<const char*>(p)) : std::string();
  }
  std::int64_t integer(int c) const override { return sqlite3_column_int64(st_, c); }
  double real(int c) const override { return sqlite3_column_double(st_, c); }

 private:
  sqlite3* db_;
  sqlite3_stmt* st_ = nullptr;
  std::string error_;
};

class sqlite_db final : public db {
 public:
  explicit sqlite_db(sqlite3* db) : db_(db) {}
  ~sqlite_db() override { sqlite3_close(db_); }
  db_kind kind() const override { return db_kind::sqlite; }
  std::unique_ptr<db_cursor> prepare(std::string_view sql) override { return std::make_unique<sqlite_cursor>(db_, sql); }
  std::optional<std::string> exec(std::string_view sql) override {
    char* err = nullptr;
    const std::string text(sql);
    if (sqlite3_exec(db_, text.c_str(), nullptr, nullptr, &err) == SQLITE_OK) return std::nullopt;
    std::string why = err ? err : "unknown error";
    sqlite3_free(err);
    return why;
  }
  std::int64_t changes() const override { return sqlite3_changes(db_); }
  int schema_version() override {
    sqlite_cursor st(db_, "PRAGMA user_version");
    return st.row() ? static_cast<int>(st.integer(0)) : -1;
  }
  std::string schema_version_sql(int v) const override { return "PRAGMA user_version=" + std::to_string(v) + ";"; }
  // One process writes a store file (the node's store writer); a migration's transaction
  // is enough.
  std::optional<std::string> lock_migrations() override { return std::nullopt; }
  void unlock_migrations() override {}

 private:
  sqlite3* db_;
};

}  // namespace

std::variant<std::unique_ptr<db>, std::string> open_sqlite(const std::string& path) {
  std::error_code ec;
  const auto dir = std::filesystem::path(path).parent_path();
  if (!dir.empty()) std::filesystem::create_directories(dir, ec);
  sqlite3* handle = nullptr;
  if (sqlite3_open_v2(path.c_str(), &handle, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX, nullptr) !=
      SQLITE_OK) {
    std::string why = handle ? sqlite3_errmsg(handle) : "out of memory";
    sqlite3_close(handle);
    return "cannot open store " + path + ": " + why;
  }
  auto d = std::make_unique<sqlite_db>(handle);
  sqlite3_busy_timeout(handle, 5000);
  if (auto e = d->exec("PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON;"))
    return "store " + path + ": " + *e;
  return std::unique_ptr<db>(std::move(d));
}

}  // namespace kiln::config
