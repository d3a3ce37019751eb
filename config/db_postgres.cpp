// The store on a PostgreSQL server, through libpq: the same schema and migrations as the
// SQLite file, the schema version in a table of its own, migrations serialised across the
// processes that share the database by an advisory lock.
#include <libpq-fe.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>

#include "config/db.hpp"

namespace kiln::config {

namespace {

constexpr const char* kMigrationLock = "4812001";  // any number the processes agree on

using result_ptr = std::unique_ptr<PGresult, void (*)(PGresult*)>;
result_ptr no_result() { return result_ptr(nullptr, PQclear); }

class pg_db;

class pg_cursor final : public db_cursor {
 public:
  pg_cursor(pg_db& db, std::string sql) : db_(db), sql_(std::move(sql)) {}
  void bind_text(int i, const std::string& v) override { at(i) = v; }
  void bind_int(int i, std::int64_t v) override { at(i) = std::to_string(v); }
  void bind_real(int i, double v) override {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.17g", v);
    at(i) = buf;
  }
  bool row() override;
  std::optional<std::string> run() override;
  std::string text(int c) const override {
    if (!res_ || PQgetisnull(res_.get(), next_ - 1, c)) return {};
    return PQgetvalue(res_.get(), next_ - 1, c);
  }
  std::int64_t integer(int c) const override { return std::strtoll(text(c).c_str(), nullptr, 10); }
  double real(int c) const override { return std::strtod(text(c).c_str(), nullptr); }

 private:
  std::string& at(int i) {
    if (static_cast<std::size_t>(i) > params_.size()) params_.resize(static_cast<std::size_t>(i));
    return params_[static_cast<std::size_t>(i) - 1];
  }
  std::optional<std::string> execute();
  pg_db& db_;
  std::string sql_;
  std::vector<std::string> params_;
  result_ptr res_ = no_result();
  bool executed_ = false;
  int next_ = 0;  ///< rows handed out so far
};

class pg_db final : public db {
 public:
  explicit pg_db(PGconn* c) : conn_(c) {}
  ~pg_db() override { PQfinish(conn_); }
  db_kind kind() const override { return db_kind::postgres; }
  std::unique_ptr<db_cursor> prepare(std::string_view sql) override {
    return std::make_unique<pg_cursor>(*this, postgres_dialect(sql));
  }
  std::optional<std::string> exec(std::string_view sql) override {
    reconnect();
    result_ptr r(PQexec(conn_, postgres_dialect(sql).c_str()), PQclear);
    return check(r.get());
  }
  std::int64_t changes() const override { return changes_; }
  int schema_version() override {
    if (exec("CREATE TABLE IF NOT EXISTS kiln_schema(version INTEGER NOT NULL)")) return -1;
    result_ptr r(PQexec(conn_, "SELECT version FROM kiln_schema"), PQclear);
    if (check(r.get())) return -1;
    return PQntuples(r.get()) == 0 ? 0 : std::atoi(PQgetvalue(r.get(), 0, 0));
  }
  std::string schema_version_sql(int v) const override {
    return "DELETE FROM kiln_schema; INSERT INTO kiln_schema(version) VALUES(" + std::to_string(v) + ");";
  }
  std::optional<std::string> lock_migrations() override {
    return exec(std::string("SELECT pg_advisory_lock(") + kMigrationLock + ")");
  }
  void unlock_migrations() override { exec(std::string("SELECT pg_advisory_unlock(") + kMigrationLock + ")"); }

  // A statement with its parameters; the result, or why not.
  std::variant<result_ptr, std::string> run(const std::string& sql, const std::vector<std::string>& params) {
    reconnect();
    std::vector<const char*> values;
    for (const auto& p : params) values.push_back(p.c_str());
    result_ptr r(PQexecParams(conn_, sql.c_str(), static_cast<int>(values.size()), nullptr, values.data(), nullptr,
                              nullptr, 0),
                 PQclear);
    if (auto e = check(r.get())) return *e;
    const char* n = PQcmdTuples(r.get());
    changes_ = n && *n ? std::atoll(n) : 0;
    return r;
  }

 private:
  // A server that restarted since the last statement: outside a transaction, an empty query
  // first finds out (one round trip; the store's statements are few), and a new connection
  // takes the old one's place. Inside a transaction a lost connection fails the statement,
  // and the caller rolls back.
  void reconnect() {
    if (PQstatus(conn_) == CONNECTION_OK && PQtransactionStatus(conn_) == PQTRANS_IDLE) {
      result_ptr probe(PQexec(conn_, ""), PQclear);
      if (probe && PQresultStatus(probe.get()) == PGRES_EMPTY_QUERY) return;
    }
    if (PQstatus(conn_) == CONNECTION_BAD) PQreset(conn_);
  }
  std::optional<std::string> check(const PGresult* r) const {
    const auto st = r ? PQresultStatus(r) : PGRES_FATAL_ERROR;
    if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK || st == PGRES_EMPTY_QUERY) return std::nullopt;
    std::string why = r ? PQresultErrorMessage(r) : PQerrorMessage(conn_);
    while (!why.empty() && (why.back() == '\n' || why.back() == ' ')) why.pop_back();
    return why.empty() ? std::string("the PostgreSQL server did not answer") : why;
  }
  PGconn* conn_;
  std::int64_t changes_ = 0;
};

std::optional<std::string> pg_cursor::execute() {
  executed_ = true;
  auto r = db_.run(sql_, params_);
  if (auto* e = std::get_if<std::string>(&r)) return *e;
  res_ = std::move(std::get<result_ptr>(r));
  return std::nullopt;
}

bool pg_cursor::row() {
  if (!executed_ && execute()) return false;
  if (!res_ || next_ >= PQntuples(res_.get())) return false;
  ++next_;
  return true;
}

std::optional<std::string> pg_cursor::run() {
  if (executed_) return std::nullopt;
  return execute();
}

void no_notices(void*, const char*) {}  // "already exists, skipping" and the like

bool ident_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

}  // namespace

bool is_postgres_uri(std::string_view path) { return path.starts_with("postgresql://") || path.starts_with("postgres://"); }

std::string postgres_dialect(std::string_view sql) {
  // Phrases first: a key that counts up, and teams' insertion order (SQLite's rowid).
  std::string text(sql);
  auto replace_all = [&](std::string_view from, std::string_view to) {
    for (std::size_t p = text.find(from); p != std::string::npos; p = text.find(from, p + to.size()))
      text.replace(p, from.size(), to);
  };
  replace_all("INTEGER PRIMARY KEY AUTOINCREMENT", "BIGSERIAL PRIMARY KEY");
  replace_all("CREATE TABLE teams(", "CREATE TABLE teams(seq BIGSERIAL, ");
  std::string out;
  out.reserve(text.size() + 16);
  int param = 0;
  for (std::size_t i = 0; i < text.size();) {
    const char c = text[i];
    if (c == '\'') {  // a string literal, copied as it is ('' inside stays)
      const std::size_t end = text.find('\'', i + 1);
      const std::size_t stop = end == std::string::npos ? text.size() : end + 1;
      out.append(text, i, stop - i);
      i = stop;
      continue;
    }
    if (c == '?') {
      out += "$" + std::to_string(++param);
      ++i;
      continue;
    }
    if (ident_char(c) && (i == 0 || !ident_char(text[i - 1]))) {
      std::size_t j = i;
      while (j < text.size() && ident_char(text[j])) ++j;
      const std::string word = text.substr(i, j - i);
      if (word == "REAL") out += "DOUBLE PRECISION";
      else if (word == "INTEGER") out += "BIGINT";
      else if (word == "rowid") out += "seq";
      else if (word == "max" && j < text.size() && text[j] == '(') out += "GREATEST";
      else out += word;
      i = j;
      continue;
    }
    out += c;
    ++i;
  }
  return out;
}

std::variant<std::unique_ptr<db>, std::string> open_postgres(const std::string& uri) {
  PGconn* c = PQconnectdb(uri.c_str());
  if (!c || PQstatus(c) != CONNECTION_OK) {
    std::string why = c ? PQerrorMessage(c) : "out of memory";
    while (!why.empty() && (why.back() == '\n' || why.back() == ' ')) why.pop_back();
    PQfinish(c);
    return "cannot connect to the PostgreSQL store: " + why;
  }
  PQsetNoticeProcessor(c, no_notices, nullptr);
  return std::unique_ptr<db>(std::make_unique<pg_db>(c));
}

}  // namespace kiln::config
