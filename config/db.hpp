#pragma once
// The store's database connection, for the store's own files (internal to config/): one
// SQLite file (a single node) or a PostgreSQL server (nodes sharing one store). The store
// writes its SQL once, in SQLite's spelling with ? parameters; the PostgreSQL connection
// translates the few words that differ (postgres_dialect) and numbers the parameters.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace kiln::config {

enum class db_kind { sqlite, postgres };

/// One statement: binds by position from 1, then steps through rows or runs to completion.
/// A statement that did not prepare reports why at its first row() or run().
class db_cursor {
 public:
  virtual ~db_cursor() = default;
  virtual void bind_text(int i, const std::string& v) = 0;
  virtual void bind_int(int i, std::int64_t v) = 0;
  virtual void bind_real(int i, double v) = 0;
  /// True while there is a row (false at the end or on an error).
  virtual bool row() = 0;
  /// Runs to completion; the error text, or nothing.
  virtual std::optional<std::string> run() = 0;
  virtual std::string text(int c) const = 0;  ///< "" for NULL
  virtual std::int64_t integer(int c) const = 0;
  virtual double real(int c) const = 0;
};

class db {
 public:
  virtual ~db() = default;
  virtual db_kind kind() const = 0;
  virtual std::unique_ptr<db_cursor> prepare(std::string_view sql) = 0;
  /// One or more statements without results; the error text, or nothing.
  virtual std::optional<std::string> exec(std::string_view sql) = 0;
  /// Rows the last statement run changed.
  virtual std::int64_t changes() const = 0;
  /// The schema version the database holds (0: none yet); -1 when it cannot be read.
  virtual int schema_version() = 0;
  /// SQL that records `v` as the schema version (run inside a migration's transaction).
  virtual std::string schema_version_sql(int v) const = 0;
  /// Holds off other processes migrating the same database until the matching unlock.
  virtual std::optional<std::string> lock_migrations() = 0;
  virtual void unlock_migrations() = 0;
};

/// Whether a store path names a PostgreSQL server (postgres:// or postgresql://).
bool is_postgres_uri(std::string_view path);
std::variant<std::unique_ptr<db>, std::string> open_sqlite(const std::string& path);
std::variant<std::unique_ptr<db>, std::string> open_postgres(const std::string& uri);
/// The store's SQL as PostgreSQL reads it: ? parameters numbered $1..., and the words that
/// differ (types, AUTOINCREMENT, rowid, the two-argument max) replaced.
std::string postgres_dialect(std::string_view sql);

/// A statement with chained binds, over a db_cursor.
class statement {
 public:
  statement(db& d, std::string_view sql) : c_(d.prepare(sql)) {}
  statement& bind(int i, const std::string& v) {
    c_->bind_text(i, v);
    return *this;
  }
  statement& bind(int i, std::int64_t v) {
    c_->bind_int(i, v);
    return *this;
  }
  statement& bind(int i, double v) {
    c_->bind_real(i, v);
    return *this;
  }
  bool row() { return c_->row(); }
  std::optional<std::string> run() { return c_->run(); }
  std::string text(int c) const { return c_->text(c); }
  std::int64_t integer(int c) const { return c_->integer(c); }
  double real(int c) const { return c_->real(c); }

 private:
  std::unique_ptr<db_cursor> c_;
};

}  // namespace kiln::config
