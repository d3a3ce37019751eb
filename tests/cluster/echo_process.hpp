#pragma once
// Starts tests/cluster/wire_echo as a child process and learns its port; the child ends when
// this object does (its stdin closes).
#include <sys/types.h>

#include <string>

namespace kiln::test {

class echo_process {
 public:
  explicit echo_process(const std::string& binary);
  ~echo_process();
  echo_process(const echo_process&) = delete;
  echo_process& operator=(const echo_process&) = delete;
  int port() const { return port_; }

 private:
  pid_t pid_ = -1;
  int to_child_ = -1;
  int port_ = 0;
};

}  // namespace kiln::test
