#pragma once
// The batch runner's own types (internal to net/batch_runner.cpp and net/batch_load.cpp): a
// running batch, the runner's state, its messages, and reading a batch's files.
#include <unistd.h>

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <caf/actor.hpp>
#include <caf/actor_clock.hpp>
#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/atom.hpp>

#include "config/batch_rows.hpp"
#include "net/batch_lines.hpp"

namespace kiln::net {

struct front;
class batch_exchange;

namespace batch_parts {

using feed_atom = caf::atom_constant<caf::atom("bfeed")>;
using persist_atom = caf::atom_constant<caf::atom("bpersist")>;
using expire_atom = caf::atom_constant<caf::atom("bexpire")>;
using resume_atom = caf::atom_constant<caf::atom("bresume")>;
using store_end_atom = caf::atom_constant<caf::atom("bstoreend")>;

/// A file descriptor, closed with its holder.
struct fd_holder {
  int fd = -1;
  fd_holder() = default;
  explicit fd_holder(int f) : fd(f) {}
  fd_holder(fd_holder&& o) noexcept : fd(std::exchange(o.fd, -1)) {}
  fd_holder& operator=(fd_holder&& o) noexcept {
    if (this != &o) {
      reset();
      fd = std::exchange(o.fd, -1);
    }
    return *this;
  }
  ~fd_holder() { reset(); }
  void reset() {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
};

/// What reading a batch's files found (on a background thread).
struct loaded_batch {
  std::string error;                       ///< the input cannot be read, or the files opened
  std::vector<batch_input_error> invalid;  ///< the input cannot run
  batch_input input;
  answered out, err;  ///< what its output and error files hold already
  fd_holder out_fd, err_fd;
  std::int64_t unix_now = 0;
};

struct batch_loaded {
  std::string id;
  std::shared_ptr<loaded_batch> batch;
};
struct line_written {
  std::string id;
  std::vector<std::size_t> lines;
  bool output = true;
  std::string error;  ///< the write failed
};
struct files_sized {
  std::string id;
  std::int64_t out_bytes = 0;
  std::int64_t err_bytes = 0;
};
struct run_later {
  std::function<void()> fn;
};

enum : std::uint8_t { line_todo, line_running, line_writing, line_done };

/// One batch a runner holds.
struct job {
  config::batch_row row;
  bool loaded = false;
  std::vector<batch_line> lines;
  std::vector<std::uint8_t> state;  ///< by line
  std::vector<std::uint8_t> tries;  ///< by line: answers that sent it back to run again
  std::size_t next = 0;             ///< lines before it are not todo (retries aside)
  std::deque<std::pair<std::size_t, caf::actor_clock::time_point>> again;  ///< to run again, not before
  int running = 0;
  int writes = 0;  ///< appends not done yet
  fd_holder out, err;
  std::uint64_t origin = 0;  ///< its lines' request ids
  std::string stopping;      ///< "": runs; cancelled | expired | failed: no more lines start
  bool unrun_written = false;
  bool finishing = false;
  bool dirty = false;  ///< counts the store has not had yet
  std::int64_t out_bytes = 0, err_bytes = 0;
};

struct runner_state {
  front* f = nullptr;
  std::string model;
  std::map<std::string, job> jobs;
  std::vector<std::string> order;  ///< batch ids, oldest first
  int running = 0;                 ///< lines in flight, all batches
  int max_in_flight = 128;
  double idle_below = 0.5;
  double avg_charge = 512;  ///< tokens a line holds while it runs (prompt + output), learned
  bool asking = false, feed_armed = false, persist_armed = false;
  std::int64_t unix_base = 0;
  caf::actor_clock::time_point clock_base;
  std::map<std::pair<std::string, std::size_t>, std::weak_ptr<batch_exchange>> live;
  static inline const char* name = "kiln.batch_runner";
};

/// A line's request id sequence for its attempt: the same for the same attempt after a restart.
inline std::uint64_t line_seq(std::size_t index, std::uint8_t attempt) {
  return (static_cast<std::uint64_t>(index + 1) << 8) | attempt;
}

/// The next line to start now (null: none): one due to run again, else the first not started.
std::pair<job*, std::size_t> next_line(runner_state& st, caf::actor_clock::time_point now);
/// Whether any batch has a line to start (now or later).
bool has_runnable(const runner_state& st);
/// Learns what a line holds while it runs from an answer's usage.
void note_charge(runner_state& st, const std::string& body);
/// Reads a batch's whole input file into `text` (up to `max_bytes`); why not, or "".
std::string read_input(const std::string& path, std::size_t max_bytes, std::string& text);
/// Reads the batch's input and what its files hold on a background thread; `runner` gets batch_loaded.
void load_batch(front& f, const config::batch_row& row, caf::actor runner);

}  // namespace batch_parts
}  // namespace kiln::net

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kiln::net::batch_parts::batch_loaded)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kiln::net::batch_parts::line_written)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kiln::net::batch_parts::files_sized)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kiln::net::batch_parts::run_later)
