#include "tests/cluster/echo_process.hpp"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <stdexcept>

extern char** environ;

namespace kiln::test {

echo_process::echo_process(const std::string& binary) {
  int in[2], out[2];
  if (pipe(in) != 0 || pipe(out) != 0) throw std::runtime_error("pipe failed");
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, in[0], 0);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  posix_spawn_file_actions_addclose(&fa, in[1]);
  posix_spawn_file_actions_addclose(&fa, out[0]);
  char* argv[] = {const_cast<char*>(binary.c_str()), nullptr};
  const int rc = posix_spawn(&pid_, binary.c_str(), &fa, nullptr, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  close(in[0]);
  close(out[1]);
  to_child_ = in[1];
  if (rc != 0) {
    close(out[0]);
    throw std::runtime_error("cannot start " + binary);
  }
  FILE* f = fdopen(out[0], "r");
  if (!f || std::fscanf(f, "%d", &port_) != 1) port_ = 0;
  if (f) std::fclose(f);
}

echo_process::~echo_process() {
  if (to_child_ >= 0) close(to_child_);
  if (pid_ > 0) {
    int status = 0;
    waitpid(pid_, &status, 0);
  }
}

}  // namespace kiln::test
