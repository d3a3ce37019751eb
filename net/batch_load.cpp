// The batch runner's helpers: which line runs next, and reading a batch's files off the actor
// threads (the input, and what the output and error files hold after a restart).
#include <fcntl.h>
#include <sys/stat.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include <caf/send.hpp>
#include <nlohmann/json.hpp>

#include "net/batch_runner_parts.hpp"
#include "net/front.hpp"

namespace kiln::net::batch_parts {

std::pair<job*, std::size_t> next_line(runner_state& st, caf::actor_clock::time_point now) {
  for (const auto& id : st.order) {
    auto it = st.jobs.find(id);
    if (it == st.jobs.end()) continue;
    job& j = it->second;
    if (!j.loaded || !j.stopping.empty()) continue;
    if (!j.again.empty() && j.again.front().second <= now) {
      const std::size_t i = j.again.front().first;
      j.again.pop_front();
      if (j.state[i] == line_todo) return {&j, i};
    }
    while (j.next < j.state.size() && j.state[j.next] != line_todo) ++j.next;
    // A line sent back to run again is todo behind `next`: it waits in `again`.
    if (j.next < j.state.size()) return {&j, j.next++};
  }
  return {nullptr, 0};
}

bool has_runnable(const runner_state& st) {
  for (const auto& [id, j] : st.jobs) {
    if (!j.loaded || !j.stopping.empty()) continue;
    if (!j.again.empty()) return true;
    for (std::size_t i = j.next; i < j.state.size(); ++i)
      if (j.state[i] == line_todo) return true;
  }
  return false;
}

void note_charge(runner_state& st, const std::string& body) {
  const auto j = nlohmann::json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.contains("usage") || !j["usage"].is_object()) return;
  const double tokens = j["usage"].value("total_tokens", 0.0);
  if (tokens > 0) st.avg_charge = 0.9 * st.avg_charge + 0.1 * tokens;
}

namespace {

// Opens a batch's output or error file for appending, and reads what it holds: a last line a
// crash cut short is cut off.
std::string open_answers(const std::string& path, fd_holder& fd, answered& out) {
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  fd = fd_holder(::open(path.c_str(), O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0640));
  if (fd.fd < 0) return "cannot open " + path + ": " + std::strerror(errno);
  std::string text;
  char buf[1 << 16];
  ssize_t n;
  while ((n = ::pread(fd.fd, buf, sizeof buf, static_cast<off_t>(text.size()))) > 0) text.append(buf, static_cast<std::size_t>(n));
  if (n < 0) return "cannot read " + path + ": " + std::strerror(errno);
  out = answered_lines(text);
  if (out.whole_bytes < text.size() && ::ftruncate(fd.fd, static_cast<off_t>(out.whole_bytes)) != 0)
    return "cannot cut " + path + " to its whole lines: " + std::strerror(errno);
  return {};
}

}  // namespace

std::string read_input(const std::string& path, std::size_t max_bytes, std::string& text) {
  fd_holder fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.fd < 0) return "cannot open the input file: " + std::string(std::strerror(errno));
  struct stat s {};
  if (::fstat(fd.fd, &s) != 0 || !S_ISREG(s.st_mode)) return "the input is not a regular file";
  if (static_cast<std::size_t>(s.st_size) > max_bytes)
    return "the input file is larger than " + std::to_string(max_bytes) + " bytes";
  text.resize(static_cast<std::size_t>(s.st_size));
  std::size_t at = 0;
  while (at < text.size()) {
    const ssize_t n = ::read(fd.fd, text.data() + at, text.size() - at);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return "cannot read the input file";
    at += static_cast<std::size_t>(n);
  }
  return {};
}


void load_batch(front& f, const config::batch_row& row, caf::actor runner) {
  const auto& cfg = f.deps.cfg->batch;
  auto work = [row, runner, max_bytes = cfg.max_file_bytes, max_lines = cfg.max_lines] {
    auto b = std::make_shared<loaded_batch>();
    b->unix_now =
        std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
    std::string text;
    b->error = read_input(row.input_path, max_bytes, text);
    if (b->error.empty()) {
      auto in = read_batch_input(text, row.endpoint, max_lines, row.input_file_id.empty(), row.model);
      if (auto* errs = std::get_if<std::vector<batch_input_error>>(&in)) b->invalid = std::move(*errs);
      else b->input = std::move(std::get<batch_input>(in));
      if (b->invalid.empty() && b->input.model != row.model)
        b->invalid.push_back({"model_mismatch", "The batch's model is " + row.model + "; its lines ask for " + b->input.model + ".",
                              "body.model", 0});
    }
    if (b->error.empty() && b->invalid.empty()) b->error = open_answers(row.output_path, b->out_fd, b->out);
    if (b->error.empty() && b->invalid.empty()) b->error = open_answers(row.error_path, b->err_fd, b->err);
    caf::anon_send(runner, batch_loaded{row.id, std::move(b)});
  };
  if (f.deps.background) f.deps.background(std::move(work));
  else work();
}

}  // namespace kiln::net::batch_parts
