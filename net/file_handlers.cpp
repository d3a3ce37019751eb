// OpenAI's Files: POST /v1/files (multipart, purpose batch), GET /v1/files, GET and DELETE
// /v1/files/{id}, GET /v1/files/{id}/content. A file's bytes live in the files directory
// (written whole, then renamed into place); its row in the store. A team sees its own files.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include <caf/all.hpp>
#include <nlohmann/json.hpp>

#include "actors/ask.hpp"
#include "actors/batch_calls.hpp"
#include "net/admin_reply.hpp"
#include "net/batch_http.hpp"
#include "net/multipart.hpp"

namespace kiln::net {

namespace {

using json = nlohmann::json;
constexpr auto kAsk = std::chrono::seconds(10);

// Writes `data` to `path` whole: a temporary file, fsync'd, renamed into place.
std::string write_whole(const std::string& path, std::string_view data) {
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  if (ec) return "cannot make the files directory: " + ec.message();
  const std::string tmp = path + ".part";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0640);
  if (fd < 0) return "cannot write the file: " + std::string(std::strerror(errno));
  std::size_t at = 0;
  while (at < data.size()) {
    const ssize_t w = ::write(fd, data.data() + at, data.size() - at);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      const std::string why = std::strerror(errno);
      ::close(fd);
      ::unlink(tmp.c_str());
      return "cannot write the file: " + why;
    }
    at += static_cast<std::size_t>(w);
  }
  const bool synced = ::fsync(fd) == 0;
  ::close(fd);
  if (!synced || ::rename(tmp.c_str(), path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    return "cannot put the file in place: " + std::string(std::strerror(errno));
  }
  return {};
}

void upload(front& f, const std::shared_ptr<exchange>& ex) {
  const std::string boundary = form_boundary(ex->request().header("content-type"));
  if (boundary.empty())
    return answer_bad_request(ex, "Upload files as multipart/form-data with the fields 'purpose' and 'file'.", "file");
  auto parsed = parse_form(ex->request().body, boundary);
  if (auto* why = std::get_if<std::string>(&parsed)) return answer_bad_request(ex, "Bad multipart form: " + *why + ".", "file");
  std::string purpose;
  const form_part* file = nullptr;
  for (const auto& p : std::get<std::vector<form_part>>(parsed)) {
    if (p.name == "purpose") purpose = std::string(p.data);
    else if (p.name == "file") file = &p;
  }
  if (purpose.empty()) return answer_bad_request(ex, "'purpose' is required.", "purpose");
  if (purpose != "batch") return answer_bad_request(ex, "kiln takes files for purpose 'batch' only.", "purpose");
  if (!file) return answer_bad_request(ex, "'file' is required.", "file");
  if (file->data.empty()) return answer_bad_request(ex, "The file is empty.", "file");
  if (!f.deps.background) return answer_error(ex, {503, "server_error", "This node cannot take files now.", "", "unavailable"});
  config::file_row row;
  row.id = "file-" + random_hex(24);
  row.team = ex->who().team;
  row.purpose = purpose;
  row.filename = file->filename.empty() ? "upload.jsonl" : file->filename;
  row.bytes = static_cast<std::int64_t>(file->data.size());
  row.created_at = unix_now();
  row.path = f.deps.cfg->resolved_files_dir() + "/" + row.id + ".jsonl";
  // The body stays alive with the exchange, which the background work holds.
  f.deps.background([&f, ex, row, data = file->data]() mutable {
    if (auto why = write_whole(row.path, data); !why.empty())
      return answer_error(ex, {500, "server_error", why, "", "file_write_failed"});
    actors::ask<config::file_row>(*f.deps.sys, store_of(f), actors::file_write{row}, kAsk,
                                  [&f, ex, path = row.path](caf::expected<config::file_row> r) {
                                    if (!r) {
                                      ::unlink(path.c_str());
                                      return answer_failure(f, ex, r.error(), "store");
                                    }
                                    answer_json(ex, 200, file_json(*r));
                                  });
  });
}

void with_file(front& f, const std::shared_ptr<exchange>& ex, const std::string& id,
               std::function<void(config::file_row&)> then) {
  actors::ask<config::file_row>(*f.deps.sys, store_of(f), actors::file_call{id, ex->who().team}, kAsk,
                                [&f, ex, then = std::move(then)](caf::expected<config::file_row> r) {
                                  if (!r) return answer_failure(f, ex, r.error(), "store");
                                  then(*r);
                                });
}

void content(front& f, const std::shared_ptr<exchange>& ex, const std::string& id) {
  with_file(f, ex, id, [&f, ex](config::file_row& row) {
    if (!f.deps.background) return answer_error(ex, {503, "server_error", "This node cannot read files now.", "", "unavailable"});
    f.deps.background([ex, path = row.path] {
      std::string text;
      const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) return answer_error(ex, {404, "invalid_request_error", "The file's content is gone from this node.", "", "not_found"});
      char buf[1 << 16];
      ssize_t n;
      while ((n = ::read(fd, buf, sizeof buf)) > 0) text.append(buf, static_cast<std::size_t>(n));
      ::close(fd);
      ex->post([ex, text = std::move(text)]() mutable { ex->respond(200, std::move(text), "application/octet-stream"); });
    });
  });
}

void remove(front& f, const std::shared_ptr<exchange>& ex, const std::string& id) {
  actors::ask<config::file_row>(*f.deps.sys, store_of(f), actors::file_delete{id, ex->who().team}, kAsk,
                                [&f, ex](caf::expected<config::file_row> r) {
                                  if (!r) return answer_failure(f, ex, r.error(), "store");
                                  ::unlink(r->path.c_str());
                                  answer_json(ex, 200, {{"id", r->id}, {"object", "file"}, {"deleted", true}});
                                });
}

}  // namespace

json file_json(const config::file_row& r) {
  return {{"id", r.id},           {"object", "file"},   {"bytes", r.bytes},          {"created_at", r.created_at},
          {"filename", r.filename}, {"purpose", r.purpose}, {"status", "processed"}, {"expires_at", nullptr},
          {"status_details", nullptr}};
}

void add_file_routes(front& f) {
  const std::size_t max_upload = f.deps.cfg->batch.max_file_bytes + (64 << 10);  // the form's own bytes
  f.routes.add("POST", "/v1/files", access::team, [&f](const std::shared_ptr<exchange>& ex, const route_params&) { upload(f, ex); },
               max_upload);
  f.routes.add("GET", "/v1/files", access::team, [&f](const std::shared_ptr<exchange>& ex, const route_params&) {
    actors::ask<std::vector<config::file_row>>(*f.deps.sys, store_of(f), actors::files_call{ex->who().team}, kAsk,
                                               [&f, ex](caf::expected<std::vector<config::file_row>> r) {
                                                 if (!r) return answer_failure(f, ex, r.error(), "store");
                                                 json data = json::array();
                                                 for (const auto& row : *r) data.push_back(file_json(row));
                                                 answer_json(ex, 200, {{"object", "list"}, {"data", data}, {"has_more", false}});
                                               });
  });
  f.routes.add("GET", "/v1/files/{id}", access::team, [&f](const std::shared_ptr<exchange>& ex, const route_params& p) {
    with_file(f, ex, p.get("id"), [ex](config::file_row& row) { answer_json(ex, 200, file_json(row)); });
  });
  f.routes.add("DELETE", "/v1/files/{id}", access::team,
               [&f](const std::shared_ptr<exchange>& ex, const route_params& p) { remove(f, ex, p.get("id")); });
  f.routes.add("GET", "/v1/files/{id}/content", access::team,
               [&f](const std::shared_ptr<exchange>& ex, const route_params& p) { content(f, ex, p.get("id")); });
}

}  // namespace kiln::net
