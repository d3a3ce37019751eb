#include "net/scratch.hpp"

#include <utility>
#include <vector>

namespace kiln::net {

namespace {

constexpr std::size_t kKeep = 8;                 // spare strings a thread keeps
constexpr std::size_t kKeepCapacity = 64 << 10;  // a larger one is let go, not kept

std::vector<std::string>& spares() {
  thread_local std::vector<std::string> s;
  return s;
}

}  // namespace

scratch::scratch() {
  auto& s = spares();
  if (s.empty()) return;
  s_ = std::move(s.back());
  s.pop_back();
}

scratch::~scratch() {
  auto& s = spares();
  if (s.size() >= kKeep || s_.capacity() > kKeepCapacity) return;
  s_.clear();
  s.push_back(std::move(s_));
}

}  // namespace kiln::net
