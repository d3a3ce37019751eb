#include "net/batch_runner.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <deque>
#include <fstream>
#include <map>
#include <sstream>

#include <caf/all.hpp>
#include <nlohmann/json.hpp>
#include <xxhash.h>

#include "actors/admission.hpp"
#include "actors/ask.hpp"
#include "actors/batch_calls.hpp"
#include "actors/node_supervisor.hpp"
#include "net/admin_reply.hpp"
#include "net/batch_exchange.hpp"
#include "net/batch_lines.hpp"
#include "net/batch_runner_parts.hpp"

namespace kiln::net {

std::string batch_file_id(const std::string& batch_id, const std::string& what) {
  const std::string key = batch_id + ":" + what;
  char hex[33];
  const XXH128_hash_t h = XXH3_128bits(key.data(), key.size());
  std::snprintf(hex, sizeof hex, "%016llx%016llx", static_cast<unsigned long long>(h.high64),
                static_cast<unsigned long long>(h.low64));
  return "file-" + std::string(hex, 24);
}

namespace {

using json = nlohmann::json;
using namespace batch_parts;
constexpr auto kAsk = std::chrono::seconds(1);
constexpr auto kStoreAsk = std::chrono::seconds(10);
constexpr auto kFeedEvery = std::chrono::milliseconds(50);
constexpr auto kPersistEvery = std::chrono::seconds(1);
constexpr auto kStoreRetry = std::chrono::seconds(2);
constexpr int kMostServerTries = 3;  ///< a line that failed inside kiln (5xx) is tried this often

using runner_actor = caf::stateful_actor<runner_state>;

std::int64_t unix_of(runner_actor* self) {
  auto& st = self->state;
  return st.unix_base + std::chrono::duration_cast<std::chrono::seconds>(self->clock().now() - st.clock_base).count();
}

void feed(runner_actor* self);
void maybe_finish(runner_actor* self, job& j);

caf::actor store(runner_actor* self) {
  return caf::actor_cast<caf::actor>(self->system().registry().get(actors::store_name));
}

// The batch's row as it is now, to the store (what a restart starts from; the files say which lines are done).
void persist(runner_actor* self, job& j) {
  j.dirty = false;
  auto s = store(self);
  if (!s) return;
  // Asked, not sent: an answer this actor has no handler for would end it (CAF 0.17).
  self->request(s, kStoreAsk, actors::batch_write{j.row})
      .then([](config::batch_row&) {},
            [self, id = j.row.id](caf::error& e) {
              std::fprintf(stderr, "kiln: batch %s: the store did not take its state: %s\n", id.c_str(),
                           self->system().render(e).c_str());
            });
}

void arm_persist(runner_actor* self) {
  if (self->state.persist_armed) return;
  self->state.persist_armed = true;
  self->delayed_send(self, kPersistEvery, persist_atom::value);
}

// Appends text to one of the batch's files on a background thread; the runner hears when it is there.
void append(runner_actor* self, job& j, const std::vector<std::size_t>& lines, bool output, std::string text) {
  ++j.writes;
  const int fd = output ? j.out.fd : j.err.fd;
  auto handle = caf::actor_cast<caf::actor>(self);
  self->state.f->deps.background([fd, text = std::move(text), handle, id = j.row.id, lines, output] {
    std::string error;
    std::size_t at = 0;
    while (at < text.size()) {
      const ssize_t w = ::write(fd, text.data() + at, text.size() - at);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        error = std::strerror(errno);
        break;
      }
      at += static_cast<std::size_t>(w);
    }
    caf::anon_send(handle, line_written{id, lines, output, error});
  });
}

std::string line_id(const job& j, std::size_t i) { return "batch_req_" + j.row.id.substr(6) + "_" + std::to_string(i + 1); }

void send_line(runner_actor* self, job& j, std::size_t i) {
  auto& st = self->state;
  j.state[i] = line_running;
  ++j.running;
  ++st.running;
  http_request req;
  req.method = "POST";
  req.path = j.row.endpoint;
  req.body = j.lines[i].body;
  req.headers = {{"content-type", "application/json"}, {"x-priority", "batch"}};
  caller who;
  who.team = j.row.team;
  who.id_origin = j.origin;
  who.id_seq = line_seq(i, j.tries[i]);
  auto strand = st.f->new_strand();
  auto ex = std::make_shared<batch_exchange>(std::move(req), std::move(who), caf::actor_cast<caf::actor>(self), j.row.id, i, strand);
  st.live[{j.row.id, i}] = ex;
  const auto m = st.f->routes.find("POST", j.row.endpoint);
  if (!m.run) return ex->respond(404, error_json({404, "invalid_request_error", "No endpoint " + j.row.endpoint + ".", "", ""}));
  strand([h = m.run, ex] { (*h)(ex, route_params{}); });
}

// How many more lines may start now, from the model's picture in admission.
int lines_allowed(const runner_state& st, const actors::batch_room& room) {
  const int most = room.online_in_flight > 0 ? std::max(1, st.max_in_flight / 4) : st.max_in_flight;
  const int slots = most - st.running;
  if (slots <= 0 || room.serving == 0 || room.online_waiting > 0 || room.batch_waiting > 0) return 0;
  if (room.capacity <= 0) return slots;
  double budget = st.idle_below * static_cast<double>(room.capacity) - static_cast<double>(room.online_in_flight) -
                  static_cast<double>(room.batch_in_flight);
  int n = 0;
  while (n < slots && budget > 0) {
    budget -= st.avg_charge;
    ++n;
  }
  return n;
}

void start_lines(runner_actor* self, int n) {
  auto& st = self->state;
  const auto now = self->clock().now();
  for (int k = 0; k < n; ++k) {
    auto next = next_line(st, now);
    if (!next.first) break;
    send_line(self, *next.first, next.second);
  }
  if (has_runnable(st) && !st.feed_armed) {
    st.feed_armed = true;
    self->delayed_send(self, kFeedEvery, feed_atom::value);
  }
}

void feed(runner_actor* self) {
  auto& st = self->state;
  if (st.asking || !has_runnable(st) || st.running >= st.max_in_flight) return;
  auto admission = caf::actor_cast<caf::actor>(self->system().registry().get(actors::admission_name));
  if (!admission) return start_lines(self, st.max_in_flight - st.running);  // a front: the router's gate paces batch
  st.asking = true;
  self->request(admission, kAsk, actors::batch_room_ask{st.model})
      .then(
          [self](actors::batch_room& room) {
            self->state.asking = false;
            start_lines(self, lines_allowed(self->state, room));
          },
          [self](caf::error&) {
            self->state.asking = false;
            start_lines(self, 0);
          });
}

void finish(runner_actor* self, job& j);

// The lines that will not run now (cancelled, or past the deadline) go to the error file.
void write_unrun(runner_actor* self, job& j) {
  const bool expired = j.stopping == "expired";
  const std::string code = expired ? "batch_expired" : "batch_cancelled";
  const std::string message = expired ? "This request could not be executed before the completion window expired."
                                      : "The batch was cancelled before this request ran.";
  std::string text;
  std::vector<std::size_t> lines;
  for (std::size_t i = 0; i < j.lines.size(); ++i)
    if (j.state[i] == line_todo) {
      j.state[i] = line_writing;
      lines.push_back(i);
      text += unrun_line(line_id(j, i), j.lines[i].custom_id, code, message);
    }
  j.unrun_written = true;
  if (!lines.empty()) append(self, j, lines, false, std::move(text));
}

void maybe_finish(runner_actor* self, job& j) {
  if (!j.loaded || j.finishing || j.running > 0 || j.writes > 0) return;
  if (!j.stopping.empty() && !j.unrun_written) {
    write_unrun(self, j);
    if (j.writes > 0) return;
  }
  for (auto s : j.state)
    if (s != line_done) return;
  finish(self, j);
}

void finish(runner_actor* self, job& j) {
  j.finishing = true;
  j.row.status = "finalizing";
  j.row.finalizing_at = unix_of(self);
  persist(self, j);
  const int out = j.out.fd, err = j.err.fd;
  auto handle = caf::actor_cast<caf::actor>(self);
  self->state.f->deps.background([out, err, handle, id = j.row.id] {
    struct stat a {}, b {};
    ::fsync(out);
    ::fsync(err);
    const std::int64_t out_bytes = ::fstat(out, &a) == 0 ? a.st_size : 0;
    const std::int64_t err_bytes = ::fstat(err, &b) == 0 ? b.st_size : 0;
    caf::anon_send(handle, files_sized{id, out_bytes, err_bytes});
  });
}

// The batch's last rows: its files, then its end.
void store_end(runner_actor* self, const std::string& id) {
  auto& st = self->state;
  auto it = st.jobs.find(id);
  if (it == st.jobs.end()) return;
  job& j = it->second;
  auto s = store(self);
  std::vector<config::file_row> files;
  if (j.out_bytes > 0)
    files.push_back({j.row.output_file_id, j.row.team, "batch_output", j.row.id + "_output.jsonl", j.out_bytes, unix_of(self), j.row.output_path});
  if (j.err_bytes > 0)
    files.push_back({j.row.error_file_id, j.row.team, "batch_output", j.row.id + "_error.jsonl", j.err_bytes, unix_of(self), j.row.error_path});
  if (!s) {
    self->delayed_send(self, kStoreRetry, store_end_atom::value, id);
    return;
  }
  for (auto& f : files) self->request(s, kStoreAsk, actors::file_write{f}).then([](config::file_row&) {}, [](caf::error&) {});
  self->request(s, kStoreAsk, actors::batch_write{j.row})
      .then(
          [self, id](config::batch_row&) {
            auto& st = self->state;
            st.jobs.erase(id);
            st.order.erase(std::remove(st.order.begin(), st.order.end(), id), st.order.end());
          },
          [self, id](caf::error&) { self->delayed_send(self, kStoreRetry, store_end_atom::value, id); });
}

void on_loaded(runner_actor* self, batch_loaded& l) {
  auto& st = self->state;
  auto it = st.jobs.find(l.id);
  if (it == st.jobs.end()) return;
  job& j = it->second;
  loaded_batch& b = *l.batch;
  const std::int64_t now = unix_of(self);
  if (!b.error.empty() || !b.invalid.empty()) {
    json data = json::array();
    if (!b.error.empty()) data.push_back({{"code", "file_unreadable"}, {"message", b.error}, {"param", nullptr}, {"line", nullptr}});
    for (const auto& e : b.invalid)
      data.push_back({{"code", e.code}, {"message", e.message}, {"param", e.param.empty() ? json(nullptr) : json(e.param)},
                      {"line", e.line > 0 ? json(e.line) : json(nullptr)}});
    j.row.errors = json{{"object", "list"}, {"data", data}}.dump();
    j.row.status = "failed";
    j.row.failed_at = now;
    persist(self, j);
    st.jobs.erase(it);
    st.order.erase(std::remove(st.order.begin(), st.order.end(), l.id), st.order.end());
    return;
  }
  j.lines = std::move(b.input.lines);
  j.out = std::move(b.out_fd);
  j.err = std::move(b.err_fd);
  j.state.assign(j.lines.size(), line_todo);
  j.tries.assign(j.lines.size(), 0);
  for (std::size_t i = 0; i < j.lines.size(); ++i)
    if (b.out.custom_ids.count(j.lines[i].custom_id) || b.err.custom_ids.count(j.lines[i].custom_id)) j.state[i] = line_done;
  j.row.total = static_cast<std::int64_t>(j.lines.size());
  j.row.completed = b.out.lines;
  j.row.failed = b.err.lines;
  j.loaded = true;
  if (j.stopping.empty()) j.row.status = "in_progress";
  if (j.row.in_progress_at == 0) j.row.in_progress_at = now;
  persist(self, j);
  if (j.row.expires_at > 0) {
    const auto left = std::chrono::seconds(std::max<std::int64_t>(0, j.row.expires_at - b.unix_now));
    self->delayed_send(self, left, expire_atom::value, j.row.id);
  }
  maybe_finish(self, j);
  feed(self);
}

void on_answer(runner_actor* self, line_answer& a) {
  auto& st = self->state;
  st.live.erase({a.batch_id, a.index});
  auto it = st.jobs.find(a.batch_id);
  if (it == st.jobs.end()) return;
  job& j = it->second;
  if (a.index >= j.state.size() || j.state[a.index] != line_running) return;
  --j.running;
  --st.running;
  const bool busy = a.status == 429 || a.status == 503;
  const bool server = a.status == 500 || a.status == 502 || a.status == 504;
  if ((busy || (server && j.tries[a.index] + 1 < kMostServerTries)) && j.stopping.empty()) {
    // Over the team's limit, shed, or lost inside kiln: the line runs again later (with a new
    // attempt number, so that usage counts the attempt that runs).
    if (j.tries[a.index] < 255) ++j.tries[a.index];
    j.state[a.index] = line_todo;
    const auto wait = std::chrono::milliseconds(static_cast<std::int64_t>(std::max(1.0, a.retry_after_s) * 1000));
    j.again.push_back({a.index, self->clock().now() + wait});
    return feed(self);
  }
  if (busy || server) {  // stopping: it did not run
    j.state[a.index] = line_todo;
    maybe_finish(self, j);
    return feed(self);
  }
  const bool ok = a.status / 100 == 2;
  if (ok) note_charge(st, a.body);
  j.state[a.index] = line_writing;
  const actors::request_id rid{j.origin, line_seq(a.index, j.tries[a.index])};
  append(self, j, {a.index}, ok, answer_line(line_id(j, a.index), j.lines[a.index].custom_id, a.status, rid.str(), a.body));
  feed(self);
}

void on_written(runner_actor* self, line_written& w) {
  auto& st = self->state;
  auto it = st.jobs.find(w.id);
  if (it == st.jobs.end()) return;
  job& j = it->second;
  --j.writes;
  if (!w.error.empty()) {
    std::fprintf(stderr, "kiln: batch %s: cannot write its %s file: %s\n", j.row.id.c_str(), w.output ? "output" : "error",
                 w.error.c_str());
    for (auto i : w.lines) j.state[i] = line_todo;
    if (j.stopping.empty()) j.stopping = "failed";
    j.unrun_written = true;  // nothing more goes to its files
    j.row.status = "failed";
    j.row.failed_at = unix_of(self);
    j.row.errors = json{{"object", "list"},
                        {"data", json::array({{{"code", "write_failed"}, {"message", "Cannot write the batch's files: " + w.error},
                                               {"param", nullptr}, {"line", nullptr}}})}}
                       .dump();
    persist(self, j);
    return;
  }
  for (auto i : w.lines) {
    j.state[i] = line_done;
    if (w.output) ++j.row.completed;
    else ++j.row.failed;
  }
  j.dirty = true;
  arm_persist(self);
  maybe_finish(self, j);
}

caf::behavior runner(runner_actor* self, front* f, std::string model, std::int64_t unix_base) {
  auto& st = self->state;
  st.f = f;
  st.model = std::move(model);
  st.unix_base = unix_base;
  st.clock_base = self->clock().now();
  st.max_in_flight = f->deps.cfg->batch.max_in_flight;
  st.idle_below = f->deps.cfg->batch.idle_below;
  self->attach_functor([self] {
    for (auto& [key, ex] : self->state.live)
      if (auto e = ex.lock()) e->interrupt();
  });
  return {
      [self](batch_run& r) {
        auto& st = self->state;
        if (st.jobs.count(r.row.id)) return;
        job& j = st.jobs[r.row.id];
        j.row = std::move(r.row);
        j.origin = XXH64(j.row.id.data(), j.row.id.size(), 0) | 1;
        st.order.push_back(j.row.id);
        load_batch(*st.f, j.row, caf::actor_cast<caf::actor>(self));
      },
      [self](batch_loaded& l) { on_loaded(self, l); },
      [self](line_answer& a) { on_answer(self, a); },
      [self](line_written& w) { on_written(self, w); },
      [self](line_timer& t) { self->delayed_send(self, std::chrono::milliseconds(t.ms), run_later{std::move(t.fn)}); },
      [](run_later& r) { r.fn(); },
      [self](feed_atom) {
        self->state.feed_armed = false;
        feed(self);
      },
      [self](persist_atom) {
        self->state.persist_armed = false;
        for (auto& [id, j] : self->state.jobs)
          if (j.dirty && !j.finishing) persist(self, j);
      },
      [self](expire_atom, const std::string& id) {
        auto it = self->state.jobs.find(id);
        if (it == self->state.jobs.end() || !it->second.stopping.empty()) return;
        it->second.stopping = "expired";
        maybe_finish(self, it->second);
      },
      [self](files_sized& s) {
        auto it = self->state.jobs.find(s.id);
        if (it == self->state.jobs.end()) return;
        job& j = it->second;
        j.out_bytes = s.out_bytes;
        j.err_bytes = s.err_bytes;
        const std::int64_t now = unix_of(self);
        j.row.output_file_id = j.out_bytes > 0 ? batch_file_id(j.row.id, "output") : "";
        j.row.error_file_id = j.err_bytes > 0 ? batch_file_id(j.row.id, "error") : "";
        if (j.stopping == "failed") j.row.status = "failed";
        else if (j.stopping == "expired") j.row.status = "expired", j.row.expired_at = now;
        else if (j.stopping == "cancelled") j.row.status = "cancelled", j.row.cancelled_at = now;
        else j.row.status = "completed", j.row.completed_at = now;
        store_end(self, s.id);
      },
      [self](store_end_atom, const std::string& id) { store_end(self, id); },
      [self](batch_cancel& c) -> caf::result<config::batch_row> {
        auto it = self->state.jobs.find(c.id);
        if (it == self->state.jobs.end() || (!c.team.empty() && it->second.row.team != c.team))
          return actors::make_error(actors::errc::unknown_model, "No batch found with id '" + c.id + "'.");
        job& j = it->second;
        if (j.finishing)
          return actors::make_error(actors::errc::conflict, "Cannot cancel a batch with status " + j.row.status + ".");
        if (!j.stopping.empty()) return j.row;
        j.stopping = "cancelled";
        j.row.status = "cancelling";
        j.row.cancelling_at = unix_of(self);
        persist(self, j);
        maybe_finish(self, j);
        return j.row;
      },
  };
}

struct manager_state {
  front* f = nullptr;
  std::int64_t unix_base = 0;
  std::map<std::string, caf::actor> runners;  ///< by model
  std::map<std::string, std::string> model_of;  ///< batch id -> model
  static inline const char* name = "kiln.batches";
};

caf::actor runner_of(caf::stateful_actor<manager_state>* self, const std::string& model) {
  auto& st = self->state;
  auto& r = st.runners[model];
  if (!r) r = self->spawn<caf::linked>(runner, st.f, model, st.unix_base);
  return r;
}

caf::behavior manager(caf::stateful_actor<manager_state>* self, front* f, std::int64_t unix_base) {
  self->state.f = f;
  self->state.unix_base = unix_base;
  self->send(self, resume_atom::value);
  return {
      [self](resume_atom) {
        auto s = caf::actor_cast<caf::actor>(self->system().registry().get(actors::store_name));
        if (!s) return;  // a node without a store runs no batches
        self->request(s, kStoreAsk, actors::batches_call{"", "", 0, true})
            .then(
                [self](std::vector<config::batch_row>& open) {
                  const std::string& node = self->state.f->deps.cfg->cluster.node;
                  for (auto& row : open)
                    if (row.node == node) self->send(self, batch_run{std::move(row)});
                },
                [self](caf::error&) { self->delayed_send(self, kStoreRetry, resume_atom::value); });
      },
      [self](batch_run& r) {
        self->state.model_of[r.row.id] = r.row.model;
        self->send(runner_of(self, r.row.model), std::move(r));
      },
      [self](batch_cancel& c) -> caf::result<config::batch_row> {
        auto it = self->state.model_of.find(c.id);
        if (it == self->state.model_of.end())
          return actors::make_error(actors::errc::unknown_model, "No batch found with id '" + c.id + "'.");
        return actors::pass_on<config::batch_row>(self, runner_of(self, it->second), std::move(c), kStoreAsk);
      },
  };
}

}  // namespace

caf::actor spawn_batches(front& f, std::int64_t unix_now) { return f.deps.sys->spawn(manager, &f, unix_now); }

}  // namespace kiln::net
