// OpenAI's Batches: POST /v1/batches (an uploaded input file, or seed 000's form with file
// paths inside the files directory), GET /v1/batches[/{id}], POST /v1/batches/{id}/cancel.
// A new batch's input is read and checked before it is stored; the node's batch manager runs it.

#include <cstdio>
#include <filesystem>

#include <caf/all.hpp>
#include <nlohmann/json.hpp>

#include "actors/ask.hpp"
#include "actors/batch_calls.hpp"
#include "net/admin_reply.hpp"
#include "net/batch_http.hpp"
#include "net/batch_lines.hpp"
#include "net/batch_runner.hpp"
#include "net/batch_runner_parts.hpp"
#include "net/json_body.hpp"

namespace kiln::net {

namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;
constexpr auto kAsk = std::chrono::seconds(10);
constexpr std::int64_t kLongestWindow = 7 * 86400;

json when(std::int64_t t) { return t > 0 ? json(t) : json(nullptr); }
json id_or_null(const std::string& s) { return s.empty() ? json(nullptr) : json(s); }

// "24h", "90m", "30s": seconds (0 when it is not one, or longer than a week).
std::int64_t window_seconds(const std::string& w) {
  if (w.size() < 2 || w.size() > 8) return 0;
  std::int64_t n = 0;
  for (std::size_t i = 0; i + 1 < w.size(); ++i) {
    if (w[i] < '0' || w[i] > '9') return 0;
    n = n * 10 + (w[i] - '0');
  }
  const char unit = w.back();
  const std::int64_t s = unit == 's' ? n : unit == 'm' ? n * 60 : unit == 'h' ? n * 3600 : 0;
  return s > 0 && s <= kLongestWindow ? s : 0;
}

// A path seed 000's form names: under the files directory, whatever its spelling ("" if not).
std::string inside_files_dir(front& f, std::string uri) {
  if (uri.rfind("file://", 0) == 0) uri = uri.substr(7);
  if (uri.empty()) return {};
  const fs::path root = fs::weakly_canonical(f.deps.cfg->resolved_files_dir());
  fs::path p = fs::path(uri).is_absolute() ? fs::path(uri) : root / uri;
  p = fs::weakly_canonical(p);
  const auto rel = p.lexically_relative(root);
  if (rel.empty() || *rel.begin() == "..") return {};
  return p.string();
}

// A row as the API shows it: its files only once it has ended.
json shown(config::batch_row b) {
  if (!b.ended()) b.output_file_id.clear(), b.error_file_id.clear();
  return batch_json(b);
}

// Reads and checks the input (off the I/O threads), stores the batch and hands it to the
// manager: the answer is the stored row.
void create(front& f, const std::shared_ptr<exchange>& ex, config::batch_row row, bool seed_form) {
  if (!f.deps.background) return answer_error(ex, {503, "server_error", "This node cannot run batches now.", "", "unavailable"});
  f.deps.background([&f, ex, row = std::move(row), seed_form]() mutable {
    std::string text;
    if (auto why = batch_parts::read_input(row.input_path, f.deps.cfg->batch.max_file_bytes, text); !why.empty())
      return answer_error(ex, {400, "invalid_request_error", "The input file cannot be read on this node: " + why + ".",
                               seed_form ? "input_uri" : "input_file_id", ""});
    auto in = read_batch_input(text, row.endpoint, f.deps.cfg->batch.max_lines, seed_form, row.model);
    if (auto* errs = std::get_if<std::vector<batch_input_error>>(&in)) {
      const auto& e = errs->front();
      std::string where = e.line > 0 ? " (line " + std::to_string(e.line) + ")" : "";
      return ex->post([ex, msg = e.message + where, param = e.param, code = e.code] {
        ex->respond(400, error_json({400, "invalid_request_error", msg, param, code}));
      });
    }
    const auto& input = std::get<batch_input>(in);
    row.model = input.model;
    row.total = static_cast<std::int64_t>(input.lines.size());
    actors::ask<config::batch_row>(*f.deps.sys, store_of(f), actors::batch_write{row}, kAsk,
                                   [&f, ex, seed_form](caf::expected<config::batch_row> r) {
                                     if (!r) return answer_failure(f, ex, r.error(), "store");
                                     if (f.batches) caf::anon_send(f.batches, batch_run{*r});
                                     json body = shown(*r);
                                     if (seed_form) body["batch_id"] = r->id;
                                     answer_json(ex, 200, body);
                                   });
  });
}

void post_batch(front& f, const std::shared_ptr<exchange>& ex) {
  json body;
  if (auto why = parse_json_object(ex->request().body, body)) return answer_bad_request(ex, *why, "");
  config::batch_row row;
  row.id = "batch_" + random_hex(24);
  row.team = ex->who().team;
  row.created_at = unix_now();
  row.node = f.deps.cfg->cluster.node;
  const std::string dir = f.deps.cfg->resolved_files_dir();
  const bool seed_form = body.contains("input_uri");
  if (seed_form) {
    for (const auto& [k, v] : body.items())
      if (k != "model" && k != "input_uri" && k != "output_uri" && k != "deadline" && k != "endpoint")
        return answer_bad_request(ex, "Unknown field '" + k + "'.", k);
    if (!body.contains("model") || !body["model"].is_string() || body["model"].get<std::string>().empty())
      return answer_bad_request(ex, "'model' is required.", "model");
    row.model = body["model"];
    row.endpoint = body.value("endpoint", json("/v1/chat/completions")).is_string()
                       ? body.value("endpoint", std::string("/v1/chat/completions"))
                       : "";
    row.input_path = body["input_uri"].is_string() ? inside_files_dir(f, body["input_uri"]) : "";
    if (row.input_path.empty()) return answer_bad_request(ex, "'input_uri' must name a file under " + dir + ".", "input_uri");
    row.output_path = body.contains("output_uri") && body["output_uri"].is_string() ? inside_files_dir(f, body["output_uri"]) : "";
    if (row.output_path.empty() || row.output_path == row.input_path)
      return answer_bad_request(ex, "'output_uri' must name a new file under " + dir + ".", "output_uri");
    row.error_path = row.output_path + ".errors";
    if (!body.contains("deadline") || !body["deadline"].is_number_integer() || body["deadline"].get<std::int64_t>() <= row.created_at)
      return answer_bad_request(ex, "'deadline' must be a time to come, in unix seconds.", "deadline");
    row.expires_at = body["deadline"];
  } else {
    for (const auto& [k, v] : body.items())
      if (k != "input_file_id" && k != "endpoint" && k != "completion_window" && k != "metadata")
        return answer_bad_request(ex, "Unknown field '" + k + "'.", k);
    if (!body.contains("input_file_id") || !body["input_file_id"].is_string())
      return answer_bad_request(ex, "'input_file_id' is required.", "input_file_id");
    row.input_file_id = body["input_file_id"];
    row.completion_window = body.value("completion_window", json("")).is_string() ? body.value("completion_window", "") : "";
    const std::int64_t window = window_seconds(row.completion_window);
    if (window == 0) return answer_bad_request(ex, "'completion_window' must be like 24h (at most 7 days).", "completion_window");
    row.expires_at = row.created_at + window;
    if (body.contains("metadata") && !body["metadata"].is_null()) {
      const json& m = body["metadata"];
      if (!m.is_object() || m.size() > 16) return answer_bad_request(ex, "'metadata' must be an object of at most 16 strings.", "metadata");
      for (const auto& [k, v] : m.items())
        if (k.size() > 64 || !v.is_string() || v.get<std::string>().size() > 512)
          return answer_bad_request(ex, "'metadata' keys are at most 64 characters and values strings of at most 512.", "metadata");
      row.metadata = m.dump();
    }
    row.endpoint = body.value("endpoint", json("")).is_string() ? body.value("endpoint", "") : "";
    row.output_path = dir + "/" + row.id + ".output.jsonl";
    row.error_path = dir + "/" + row.id + ".errors.jsonl";
  }
  if (row.endpoint != "/v1/chat/completions" && row.endpoint != "/v1/completions")
    return answer_bad_request(ex, "'endpoint' must be /v1/chat/completions or /v1/completions.", "endpoint");
  row.output_file_id = batch_file_id(row.id, "output");
  row.error_file_id = batch_file_id(row.id, "error");
  if (seed_form) return create(f, ex, std::move(row), true);
  actors::file_call input{row.input_file_id, row.team};  // before the row moves into the callback
  actors::ask<config::file_row>(*f.deps.sys, store_of(f), std::move(input), kAsk,
                                [&f, ex, row = std::move(row)](caf::expected<config::file_row> r) mutable {
                                  if (!r) return answer_failure(f, ex, r.error(), "store");
                                  if (r->purpose != "batch")
                                    return answer_error(ex, {400, "invalid_request_error", "The input file's purpose must be batch.",
                                                             "input_file_id", ""});
                                  row.input_path = r->path;
                                  create(f, ex, std::move(row), false);
                                });
}

void list(front& f, const std::shared_ptr<exchange>& ex) {
  actors::batches_call q{ex->who().team, "", 20, false};
  for (const auto& [k, v] : query_pairs(ex->request().query)) {
    if (k == "after") q.after = v;
    else if (k == "limit") {
      q.limit = std::atoi(v.c_str());
      if (q.limit < 1 || q.limit > 100) return answer_bad_request(ex, "'limit' must be from 1 to 100.", "limit");
    }
  }
  ++q.limit;  // one more says whether there are more
  actors::ask<std::vector<config::batch_row>>(*f.deps.sys, store_of(f), q, kAsk,
                                              [&f, ex, limit = q.limit - 1](caf::expected<std::vector<config::batch_row>> r) {
                                                if (!r) return answer_failure(f, ex, r.error(), "store");
                                                const bool more = static_cast<int>(r->size()) > limit;
                                                if (more) r->resize(static_cast<std::size_t>(limit));
                                                json data = json::array();
                                                for (const auto& b : *r) data.push_back(shown(b));
                                                answer_json(ex, 200,
                                                            {{"object", "list"}, {"data", data},
                                                             {"first_id", r->empty() ? json(nullptr) : json(r->front().id)},
                                                             {"last_id", r->empty() ? json(nullptr) : json(r->back().id)},
                                                             {"has_more", more}});
                                              });
}

void cancel(front& f, const std::shared_ptr<exchange>& ex, const std::string& id) {
  const std::string team = ex->who().team;
  actors::ask<config::batch_row>(
      *f.deps.sys, f.batches, batch_cancel{id, team}, kAsk, [&f, ex, id, team](caf::expected<config::batch_row> r) {
        if (r) return answer_json(ex, 200, shown(*r));
        // Not running here: ended already, or another node's.
        actors::ask<config::batch_row>(*f.deps.sys, store_of(f), actors::batch_call{id, team}, kAsk,
                                       [&f, ex](caf::expected<config::batch_row> b) {
                                         if (!b) return answer_failure(f, ex, b.error(), "store");
                                         if (b->ended() || b->status == "cancelling")
                                           return answer_error(ex, {409, "invalid_request_error",
                                                                    "Cannot cancel a batch with status " + b->status + ".", "",
                                                                    "conflict"});
                                         answer_error(ex, {409, "invalid_request_error",
                                                           "Batch " + b->id + " runs on node " + b->node + "; cancel it there.", "",
                                                           "conflict"});
                                       });
      });
}

}  // namespace

std::string random_hex(std::size_t n) {
  std::string out;
  while (out.size() < n) out += config::new_api_key().substr(5);
  return out.substr(0, n);
}

json batch_json(const config::batch_row& b) {
  json metadata = nullptr;
  if (!b.metadata.empty()) metadata = json::parse(b.metadata, nullptr, false);
  json errors = nullptr;
  if (!b.errors.empty()) errors = json::parse(b.errors, nullptr, false);
  return {{"id", b.id},
          {"object", "batch"},
          {"endpoint", b.endpoint},
          {"model", b.model},
          {"errors", errors.is_discarded() ? json(nullptr) : errors},
          {"input_file_id", id_or_null(b.input_file_id)},
          {"completion_window", b.completion_window},
          {"status", b.status},
          {"output_file_id", id_or_null(b.output_file_id)},
          {"error_file_id", id_or_null(b.error_file_id)},
          {"created_at", b.created_at},
          {"in_progress_at", when(b.in_progress_at)},
          {"expires_at", when(b.expires_at)},
          {"finalizing_at", when(b.finalizing_at)},
          {"completed_at", when(b.completed_at)},
          {"failed_at", when(b.failed_at)},
          {"expired_at", when(b.expired_at)},
          {"cancelling_at", when(b.cancelling_at)},
          {"cancelled_at", when(b.cancelled_at)},
          {"request_counts", {{"total", b.total}, {"completed", b.completed}, {"failed", b.failed}}},
          {"metadata", metadata.is_discarded() ? json(nullptr) : metadata}};
}

void add_batch_routes(front& f) {
  f.routes.add("POST", "/v1/batches", access::team,
               [&f](const std::shared_ptr<exchange>& ex, const route_params&) { post_batch(f, ex); });
  f.routes.add("GET", "/v1/batches", access::team, [&f](const std::shared_ptr<exchange>& ex, const route_params&) { list(f, ex); });
  f.routes.add("GET", "/v1/batches/{id}", access::team, [&f](const std::shared_ptr<exchange>& ex, const route_params& p) {
    actors::ask<config::batch_row>(*f.deps.sys, store_of(f), actors::batch_call{p.get("id"), ex->who().team}, kAsk,
                                   [&f, ex](caf::expected<config::batch_row> r) {
                                     if (!r) return answer_failure(f, ex, r.error(), "store");
                                     answer_json(ex, 200, shown(*r));
                                   });
  });
  f.routes.add("POST", "/v1/batches/{id}/cancel", access::team,
               [&f](const std::shared_ptr<exchange>& ex, const route_params& p) { cancel(f, ex, p.get("id")); });
}

}  // namespace kiln::net
