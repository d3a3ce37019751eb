// Region threads taking turns on the cores: where they do, each thread runs on one core at a
// time, the threads on different cores, moving each slot; where they do not, nothing moves;
// leaving gives a thread every core back.
#include <doctest/doctest.h>

#include <sched.h>

#include <chrono>
#include <thread>
#include <vector>

#include "sim/core_turns.hpp"

using namespace kiln::sim;
using namespace std::chrono_literals;

namespace {

std::vector<int> my_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> out;
  if (sched_getaffinity(0, sizeof set, &set) != 0) return out;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) out.push_back(c);
  return out;
}

}  // namespace

TEST_CASE("core turns: a thread per core moves one core on each slot; leaving restores every core") {
  const std::vector<int> cores = my_cores();
  if (cores.size() < 2) {
    MESSAGE("one core for this process: no turns to take");
    core_turns none(cores.size(), 1ms);
    CHECK_FALSE(none.active());
    return;
  }
  const std::size_t n = cores.size();
  const auto slot = 50ms;
  core_turns turns(n, slot);
  REQUIRE(turns.active());
  // Thread k in slot i runs on core k + i alone (of the process's cores, in order): within a
  // slot no two threads share a core, and each moves to the next core when a slot begins.
  std::vector<std::thread> threads;
  std::vector<std::vector<std::vector<int>>> seen(n);
  for (std::size_t k = 0; k < n; ++k)
    threads.emplace_back([&, k] {
      for (std::size_t i = 0; i < 2 * n + 1; ++i) {
        turns.poll(k, turns.start() + i * slot + slot / 2);
        seen[k].push_back(my_cores());
        turns.poll(k, turns.start() + i * slot + slot / 3);  // the same slot: no move
        seen[k].push_back(my_cores());
      }
      turns.leave(k);
      seen[k].push_back(my_cores());
    });
  for (auto& t : threads) t.join();
  for (std::size_t k = 0; k < n; ++k) {
    REQUIRE(seen[k].size() == 2 * (2 * n + 1) + 1);
    for (std::size_t i = 0; i < 2 * n + 1; ++i) {
      const std::vector<int> one{cores[(k + i) % n]};
      CHECK(seen[k][2 * i] == one);
      CHECK(seen[k][2 * i + 1] == one);
    }
    CHECK(seen[k].back() == cores);  // left: every core again
  }
}

TEST_CASE("core turns: fewer or more threads than cores, or one thread, take no turns") {
  const std::size_t n = my_cores().size();
  CHECK_FALSE(core_turns(1, 1ms).active());
  CHECK_FALSE(core_turns(n + 1, 1ms).active());
  if (n > 2) CHECK_FALSE(core_turns(n - 1, 1ms).active());
  core_turns off(n + 1, 1ms);
  const std::vector<int> before = my_cores();
  off.poll(0);
  off.leave(0);
  CHECK(my_cores() == before);
}
