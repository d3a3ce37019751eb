// The store writer's calls for OpenAI's files and batches.
#include "actors/batch_calls.hpp"

#include <caf/all.hpp>

#include "actors/request.hpp"
#include "actors/store_writer.hpp"

namespace kiln::actors {

namespace {

using stateful = caf::stateful_actor<store_writer_state>;

// Runs a read or write on the writer's thread and answers `Answer`, or the error `fail` makes
// of what the store said.
template <class Answer>
caf::result<Answer> stored(stateful* self, std::function<std::variant<Answer, caf::error>(config::store&)> op) {
  auto rp = self->make_response_promise<Answer>();
  on_disk<std::variant<Answer, caf::error>>(self, std::move(op), [rp](std::variant<Answer, caf::error>& r) mutable {
    if (auto* e = std::get_if<caf::error>(&r)) rp.deliver(std::move(*e));
    else rp.deliver(std::move(std::get<Answer>(r)));
  });
  return rp;
}

caf::error refused(const std::string& what, const std::string& why) {
  return make_error(errc::internal, "The store refused the " + what + ": " + why);
}

}  // namespace

caf::message_handler batch_calls(stateful* self) {
  return {
      [self](file_write& w) -> caf::result<config::file_row> {
        return stored<config::file_row>(self, [row = std::move(w.row)](config::store& s) -> std::variant<config::file_row, caf::error> {
          if (auto e = s.put_file(row)) return refused("file", *e);
          return row;
        });
      },
      [self](file_call& c) -> caf::result<config::file_row> {
        return stored<config::file_row>(self, [c](config::store& s) -> std::variant<config::file_row, caf::error> {
          auto f = s.file(c.id);
          if (!f || (!c.team.empty() && f->team != c.team)) return make_error(errc::unknown_model, "No such File object: " + c.id);
          return *f;
        });
      },
      [self](file_delete& c) -> caf::result<config::file_row> {
        return stored<config::file_row>(self, [c](config::store& s) -> std::variant<config::file_row, caf::error> {
          auto f = s.file(c.id);
          if (!f || (!c.team.empty() && f->team != c.team)) return make_error(errc::unknown_model, "No such File object: " + c.id);
          s.delete_file(c.id);
          return *f;
        });
      },
      [self](files_call& c) -> caf::result<std::vector<config::file_row>> {
        return stored<std::vector<config::file_row>>(
            self, [c](config::store& s) -> std::variant<std::vector<config::file_row>, caf::error> { return s.files(c.team); });
      },
      [self](batch_write& w) -> caf::result<config::batch_row> {
        return stored<config::batch_row>(self, [row = std::move(w.row)](config::store& s) -> std::variant<config::batch_row, caf::error> {
          if (auto e = s.put_batch(row)) return refused("batch", *e);
          return row;
        });
      },
      [self](batch_call& c) -> caf::result<config::batch_row> {
        return stored<config::batch_row>(self, [c](config::store& s) -> std::variant<config::batch_row, caf::error> {
          auto b = s.batch(c.id);
          if (!b || (!c.team.empty() && b->team != c.team)) return make_error(errc::unknown_model, "No batch found with id '" + c.id + "'.");
          return *b;
        });
      },
      [self](batches_call& c) -> caf::result<std::vector<config::batch_row>> {
        return stored<std::vector<config::batch_row>>(
            self, [c](config::store& s) -> std::variant<std::vector<config::batch_row>, caf::error> {
              if (c.open_only) return s.open_batches();
              return s.batches(c.team, c.after, c.limit);
            });
      },
  };
}

}  // namespace kiln::actors
