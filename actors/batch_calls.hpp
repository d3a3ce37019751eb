#pragma once
// The store writer's calls for OpenAI's files and batches (actors/batch_calls.cpp): the front's
// /v1/files and /v1/batches handlers and the batch runners read and write their rows here.
#include <string>
#include <vector>

#include <caf/message_handler.hpp>
#include <caf/meta/type_name.hpp>
#include <caf/stateful_actor.hpp>

#include "config/batch_rows.hpp"

namespace kiln::config {

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, file_row& x) {
  return f(caf::meta::type_name("file_row"), x.id, x.team, x.purpose, x.filename, x.bytes, x.created_at, x.path);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, batch_row& x) {
  return f(caf::meta::type_name("batch_row"), x.id, x.team, x.model, x.endpoint, x.input_file_id, x.completion_window,
           x.metadata, x.status, x.output_file_id, x.error_file_id, x.errors, x.input_path, x.output_path, x.error_path, x.node,
           x.created_at,
           x.expires_at, x.in_progress_at, x.finalizing_at, x.completed_at, x.failed_at, x.expired_at, x.cancelling_at,
           x.cancelled_at, x.total, x.completed, x.failed);
}

}  // namespace kiln::config

namespace kiln::actors {

struct store_writer_state;

/// Stores a file's row; answers it.
struct file_write {
  config::file_row row;
};
/// One file's row (unknown_model when there is none, or it is another team's; team "": any).
struct file_call {
  std::string id;
  std::string team;
};
/// A team's files, newest first.
struct files_call {
  std::string team;
};
/// Forgets a file's row; answers its row as it was.
struct file_delete {
  std::string id;
  std::string team;
};
/// Stores a batch's row; answers it.
struct batch_write {
  config::batch_row row;
};
/// One batch's row (unknown_model when there is none, or it is another team's; team "": any).
struct batch_call {
  std::string id;
  std::string team;
};
/// A team's batches ("": every team's), newest first (after: a batch id, ""); open_only:
/// every batch not ended (to resume after a restart), oldest first.
struct batches_call {
  std::string team;
  std::string after;
  int limit = 20;
  bool open_only = false;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, file_write& x) {
  return f(caf::meta::type_name("file_write"), x.row);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, file_call& x) {
  return f(caf::meta::type_name("file_call"), x.id, x.team);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, files_call& x) {
  return f(caf::meta::type_name("files_call"), x.team);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, file_delete& x) {
  return f(caf::meta::type_name("file_delete"), x.id, x.team);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, batch_write& x) {
  return f(caf::meta::type_name("batch_write"), x.row);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, batch_call& x) {
  return f(caf::meta::type_name("batch_call"), x.id, x.team);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, batches_call& x) {
  return f(caf::meta::type_name("batches_call"), x.team, x.after, x.limit, x.open_only);
}

caf::message_handler batch_calls(caf::stateful_actor<store_writer_state>* self);

}  // namespace kiln::actors
