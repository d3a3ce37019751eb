#pragma once
// Per-thread reusable buffers. A stream's event is built and sent in memory its thread used a
// moment ago (still in the caches), not in a buffer of its own last touched a whole engine step
// earlier: writing into memory that has left the caches costs a load for every line written.
#include <string>

namespace kiln::net {

/// Holds one of this thread's spare strings (empty, its capacity kept) until it goes out of
/// scope, then gives it back. Nested holders get different strings.
class scratch {
 public:
  scratch();
  ~scratch();
  scratch(const scratch&) = delete;
  scratch& operator=(const scratch&) = delete;

  std::string& str() { return s_; }

 private:
  std::string s_;
};

}  // namespace kiln::net
