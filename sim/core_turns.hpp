#pragma once
// Regions driven side by side, one thread each, taking turns on the machine's cores.
//
// A shared machine's cores do not run equally fast: a busy hardware sibling, or the interrupts
// one core takes for the others, slows it (on the 2-core development machine, core 0 ran a
// region's loop 30-40% slower than core 1 while both were busy). A region pinned to the slow
// core by chance then ends a third later than the other, whose core idles meanwhile. Taking
// turns gives every region the same share of every core, so they end together. Where the
// threads are fewer or more than the cores the process may use, or the system refuses the
// affinity calls, it does nothing: the kernel places the threads as before.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace kiln::sim {

class core_turns {
 public:
  using clock = std::chrono::steady_clock;
  /// `threads` threads (numbered 0 .. threads - 1) each move to the next core every `slot`.
  /// Reads the calling thread's affinity: the cores the process may use.
  core_turns(std::size_t threads, clock::duration slot);

  /// Whether the threads take turns (as many of them as cores, at least two).
  bool active() const { return !cpus_.empty(); }
  /// Thread k's turn, called from thread k as often as it likes: when a new slot has begun,
  /// it moves to core (k + slot number) of the process's cores, so no two threads share one.
  void poll(std::size_t k) {
    if (!cpus_.empty()) poll(k, clock::now());  // no clock read while inactive
  }
  /// poll() at `now`.
  void poll(std::size_t k, clock::time_point now);
  /// When slot 0 began (the construction).
  clock::time_point start() const { return start_; }
  /// Thread k is done taking turns: it may run on any of the process's cores again.
  void leave(std::size_t k);

 private:
  struct alignas(64) turn {
    std::int64_t slot = -1;  ///< the slot it last moved for; written by its own thread only
  };
  std::vector<int> cpus_;  ///< the process's cores; empty: inactive
  clock::time_point start_;
  clock::duration slot_;
  std::vector<turn> turns_;
};

}  // namespace kiln::sim
