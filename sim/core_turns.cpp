#include "sim/core_turns.hpp"

#include <sched.h>

#include <algorithm>

namespace kiln::sim {

core_turns::core_turns(std::size_t threads, clock::duration slot)
    : start_(clock::now()), slot_(std::max(slot, clock::duration{1})), turns_(threads) {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (threads < 2 || sched_getaffinity(0, sizeof allowed, &allowed) != 0) return;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &allowed)) cpus_.push_back(c);
  if (cpus_.size() != threads) cpus_.clear();
}

void core_turns::poll(std::size_t k, clock::time_point now) {
  if (cpus_.empty() || k >= turns_.size()) return;
  const std::int64_t slot = (now - start_) / slot_;
  if (slot == turns_[k].slot) return;
  turns_[k].slot = slot;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpus_[(k + static_cast<std::size_t>(slot)) % cpus_.size()], &one);
  (void)sched_setaffinity(0, sizeof one, &one);  // refused: the thread stays where it is
}

void core_turns::leave(std::size_t k) {
  if (cpus_.empty() || k >= turns_.size()) return;
  cpu_set_t all;
  CPU_ZERO(&all);
  for (int c : cpus_) CPU_SET(c, &all);
  (void)sched_setaffinity(0, sizeof all, &all);
}

}  // namespace kiln::sim
