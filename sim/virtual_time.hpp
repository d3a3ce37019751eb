#pragma once
// Drives actors under CAF's test_coordinator on virtual time, event by event: the
// discrete-event kernel that actor tests and the simulator share.
#include <caf/actor_system_config.hpp>
#include <caf/scheduler/test_coordinator.hpp>

namespace kiln::sim {

/// Configures an actor system to run on the test coordinator (nothing runs until asked).
void use_virtual_time(caf::actor_system_config& cfg);

class virtual_time {
 public:
  explicit virtual_time(caf::scheduler::test_coordinator& sched) : sched_(sched) {}

  caf::actor_clock::time_point now() const { return sched_.clock().now(); }
  /// Runs every job that is ready now, without moving the clock.
  std::size_t run_ready() { return sched_.run(); }
  /// Moves the clock to the next pending timeout (if any is due by `limit`) and runs what it
  /// wakes; false when nothing is due by `limit`. A wakeup whose wake ticket is void (see
  /// actors/wake_ticket.hpp) is dropped on the way, the clock moving to its time.
  bool step(caf::actor_clock::time_point limit);
  /// Fires every timeout due within `d`, one at a time in order, running jobs after each;
  /// the clock ends exactly `d` later.
  void run_for(caf::timespan d);
  /// Like run_for, but stops early once `done()` holds; returns whether it held.
  template <class Pred>
  bool run_until(Pred done, caf::timespan max) {
    const auto limit = now() + max;
    run_ready();
    while (!done()) {
      if (!step(limit)) return done();
    }
    return true;
  }

 private:
  caf::scheduler::test_coordinator& sched_;
};

}  // namespace kiln::sim
