#pragma once
// One prepared SQLite statement, for the store's own files (internal to config/).
#include <cstdint>
#include <optional>
#include <string>

#include <sqlite3.h>

namespace kiln::config {

// One prepared statement; binds by position from 1, steps, reads columns.
class statement {
 public:
  statement(sqlite3* db, const char* sql) : db_(db) {
    if (sqlite3_prepare_v2(db, sql, -1, &st_, nullptr) != SQLITE_OK) st_ = nullptr;
  }
  ~statement() { sqlite3_finalize(st_); }
  bool ok() const { return st_ != nullptr; }
  statement& bind(int i, const std::string& v) {
    sqlite3_bind_text(st_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
    return *this;
  }
  statement& bind(int i, std::int64_t v) {
    sqlite3_bind_int64(st_, i, v);
    return *this;
  }
  statement& bind(int i, double v) {
    sqlite3_bind_double(st_, i, v);
    return *this;
  }
  /// True while there is a row.
  bool row() { return st_ && sqlite3_step(st_) == SQLITE_ROW; }
  /// Runs to completion; the error text, or nothing.
  std::optional<std::string> run() {
    if (!st_) return std::string(sqlite3_errmsg(db_));
    const int rc = sqlite3_step(st_);
    if (rc != SQLITE_DONE && rc != SQLITE_ROW) return std::string(sqlite3_errmsg(db_));
    return std::nullopt;
  }
  std::string text(int c) const {
    const auto* p = sqlite3_column_text(st_, c);
    return p ? std::string(reinterpret_cast<const char*>(p)) : std::string();
  }
  std::int64_t integer(int c) const { return sqlite3_column_int64(st_, c); }
  double real(int c) const { return sqlite3_column_double(st_, c); }

 private:
  sqlite3* db_;
  sqlite3_stmt* st_ = nullptr;
};

}  // namespace kiln::config
