// The store's `files` and `batches` tables: OpenAI's Files and Batches, whose bytes live in
// the files directory and whose state the batch runners write as they go.
#include <algorithm>

#include "config/db.hpp"
#include "config/store.hpp"

namespace kiln::config {

namespace {

constexpr const char* kFileColumns = "file_id, team, purpose, filename, bytes, created_at, path";
constexpr const char* kBatchColumns =
    "batch_id, team, model, endpoint, input_file_id, completion_window, metadata, status, output_file_id, "
    "error_file_id, errors, input_path, output_path, error_path, node, created_at, expires_at, in_progress_at, finalizing_at, "
    "completed_at, failed_at, expired_at, cancelling_at, cancelled_at, total, completed, failed";

file_row file_of(const statement& st) {
  return {st.text(0), st.text(1), st.text(2), st.text(3), st.integer(4), st.integer(5), st.text(6)};
}

batch_row batch_of(const statement& st) {
  batch_row b;
  std::string* texts[] = {&b.id, &b.team, &b.model, &b.endpoint, &b.input_file_id, &b.completion_window, &b.metadata,
                          &b.status, &b.output_file_id, &b.error_file_id, &b.errors, &b.input_path, &b.output_path, &b.error_path, &b.node};
  int c = 0;
  for (auto* t : texts) *t = st.text(c++);
  std::int64_t* ints[] = {&b.created_at,   &b.expires_at, &b.in_progress_at, &b.finalizing_at, &b.completed_at,
                          &b.failed_at,    &b.expired_at, &b.cancelling_at,  &b.cancelled_at,  &b.total,
                          &b.completed,    &b.failed};
  for (auto* i : ints) *i = st.integer(c++);
  return b;
}

std::string placeholders(int n) {
  std::string s;
  for (int i = 0; i < n; ++i) s += i ? ",?" : "?";
  return s;
}

}  // namespace

std::optional<std::string> store::put_file(const file_row& f) {
  statement st(*db_, std::string("INSERT INTO files(") + kFileColumns + ") VALUES(" + placeholders(7) +
                         ") ON CONFLICT(file_id) DO UPDATE SET bytes=excluded.bytes, path=excluded.path");
  st.bind(1, f.id).bind(2, f.team).bind(3, f.purpose).bind(4, f.filename).bind(5, f.bytes).bind(6, f.created_at).bind(7, f.path);
  return st.run();
}

std::optional<file_row> store::file(const std::string& id) {
  statement st(*db_, std::string("SELECT ") + kFileColumns + " FROM files WHERE file_id=?");
  st.bind(1, id);
  if (!st.row()) return std::nullopt;
  return file_of(st);
}

std::vector<file_row> store::files(const std::string& team) {
  statement st(*db_, std::string("SELECT ") + kFileColumns + " FROM files WHERE team=? ORDER BY created_at DESC, file_id DESC");
  st.bind(1, team);
  std::vector<file_row> out;
  while (st.row()) out.push_back(file_of(st));
  return out;
}

bool store::delete_file(const std::string& id) {
  statement st(*db_, "DELETE FROM files WHERE file_id=?");
  st.bind(1, id);
  return !st.run() && db_->changes() > 0;
}

std::optional<std::string> store::put_batch(const batch_row& b) {
  std::string sql = std::string("INSERT INTO batches(") + kBatchColumns + ") VALUES(" + placeholders(27) +
                    ") ON CONFLICT(batch_id) DO UPDATE SET status=excluded.status, output_file_id=excluded.output_file_id, "
                    "error_file_id=excluded.error_file_id, errors=excluded.errors, in_progress_at=excluded.in_progress_at, "
                    "finalizing_at=excluded.finalizing_at, completed_at=excluded.completed_at, failed_at=excluded.failed_at, "
                    "expired_at=excluded.expired_at, cancelling_at=excluded.cancelling_at, "
                    "cancelled_at=excluded.cancelled_at, total=excluded.total, completed=excluded.completed, "
                    "failed=excluded.failed";
  statement st(*db_, sql);
  const std::string* texts[] = {&b.id, &b.team, &b.model, &b.endpoint, &b.input_file_id, &b.completion_window, &b.metadata,
                                &b.status, &b.output_file_id, &b.error_file_id, &b.errors, &b.input_path, &b.output_path, &b.error_path, &b.node};
  int c = 1;
  for (const auto* t : texts) st.bind(c++, *t);
  const std::int64_t ints[] = {b.created_at,    b.expires_at, b.in_progress_at, b.finalizing_at, b.completed_at,
                               b.failed_at,     b.expired_at, b.cancelling_at,  b.cancelled_at,  b.total,
                               b.completed,     b.failed};
  for (auto i : ints) st.bind(c++, i);
  return st.run();
}

std::optional<batch_row> store::batch(const std::string& id) {
  statement st(*db_, std::string("SELECT ") + kBatchColumns + " FROM batches WHERE batch_id=?");
  st.bind(1, id);
  if (!st.row()) return std::nullopt;
  return batch_of(st);
}

std::vector<batch_row> store::batches(const std::string& team, const std::string& after, int limit) {
  statement st(*db_, std::string("SELECT ") + kBatchColumns +
                         " FROM batches WHERE team=? OR ?='' ORDER BY created_at DESC, batch_id DESC");
  st.bind(1, team).bind(2, team);
  std::vector<batch_row> out;
  bool past = after.empty();
  while (st.row() && static_cast<int>(out.size()) < limit) {
    batch_row b = batch_of(st);
    if (past) out.push_back(std::move(b));
    else past = b.id == after;
  }
  return out;
}

std::vector<batch_row> store::open_batches() {
  statement st(*db_, std::string("SELECT ") + kBatchColumns +
                         " FROM batches WHERE status NOT IN ('completed','failed','expired','cancelled') "
                         "ORDER BY created_at, batch_id");
  std::vector<batch_row> out;
  while (st.row()) out.push_back(batch_of(st));
  return out;
}

}  // namespace kiln::config
