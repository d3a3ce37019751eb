#pragma once
// Runs the real `kiln serve` binary for end-to-end tests and learns its port from the banner.
#include <string>
#include <sys/types.h>

namespace kiln::test {

struct process_options {
  std::string stderr_path;  ///< where kiln's stderr goes (access log); "": a temp file, removed with it
  long max_files = 0;       ///< > 0: RLIMIT_NOFILE (soft and hard) of the process
  int port = 0;             ///< > 0: serve on this port and return at once, before the banner
  std::string store;        ///< a store file to use (kept); "": one of its own, removed with it
  std::string capture;      ///< non-empty: --capture this file
};

/// Removes a store file and what lives beside it (its WAL, shared memory, usage log).
void remove_store(const std::string& path);
/// A TCP port that was free a moment ago.
int free_port();

class kiln_process {
 public:
  /// Writes `config_toml` to a temp file and starts `kiln serve --config it --port 0` with a
  /// store of its own next to it (removed with it).
  explicit kiln_process(const std::string& config_toml, process_options opts = {});
  ~kiln_process();
  kiln_process(const kiln_process&) = delete;
  kiln_process& operator=(const kiln_process&) = delete;

  int port() const { return port_; }
  /// The store file this server uses.
  const std::string& store_path() const { return store_path_; }
  pid_t pid() const { return pid_; }
  void signal(int sig);
  /// Waits for exit; returns the exit status, or -1 on timeout or a signal death.
  int wait_exit(int timeout_ms);

 private:
  /// Kills the process if it still runs and removes its config, stderr and own store.
  void stop_and_clean();
  pid_t pid_ = -1;
  int port_ = 0;
  std::string config_path_;
  std::string store_path_;
  bool own_store_ = true;
  std::string stderr_path_;
  bool own_stderr_ = true;
};

/// User + system CPU seconds a process has used (from /proc).
double process_cpu_seconds(pid_t pid);
/// Adds lines to the [server] table of a config made by test_config.
std::string with_server(std::string config, const std::string& lines);
/// The path of the kiln binary under test.
const char* kiln_binary();

/// What `kiln ops ARGS` printed (stdout and stderr together) and its exit status.
struct ops_result {
  int status = -1;
  std::string out;
};
/// Runs `kiln ops` against the server on `port` with the tests' admin key.
ops_result run_ops(int port, const std::string& args);
/// A shell command's output (stdout and stderr together) and exit status.
ops_result run_command(const std::string& cmd);
/// The embedded default with overrides suited to tests (small limits, short timeouts).
std::string test_config(int replicas = 2, int request_timeout_ms = 400, int grace_ms = 400);
/// A [[pools]] entry for a cpu pool `model` on `dir` (created as a tiny model if absent).
std::string cpu_pool(const std::string& model, const std::string& dir, bool make_if_absent = true);

}  // namespace kiln::test
