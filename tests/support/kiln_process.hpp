#pragma once
// Runs the real `kiln serve` binary for end-to-end tests and learns its port from the banner.
#include <string>
#include <sys/types.h>

namespace kiln::test {

class kiln_process {
 public:
  /// Writes `config_toml` to a temp file and starts `kiln serve --config it --port 0`.
  explicit kiln_process(const std::string& config_toml);
  ~kiln_process();
  kiln_process(const kiln_process&) = delete;
  kiln_process& operator=(const kiln_process&) = delete;

  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  void signal(int sig);
  /// Waits for exit; returns the exit status, or -1 on timeout or a signal death.
  int wait_exit(int timeout_ms);

 private:
  pid_t pid_ = -1;
  int port_ = 0;
  std::string config_path_;
};

/// The embedded default with overrides suited to tests (small limits, short timeouts).
std::string test_config(int replicas = 2, int request_timeout_ms = 400, int grace_ms = 400);
/// A [[pools]] entry for a cpu pool `model` on `dir` (created as a tiny model if absent).
std::string cpu_pool(const std::string& model, const std::string& dir, bool make_if_absent = true);

}  // namespace kiln::test
