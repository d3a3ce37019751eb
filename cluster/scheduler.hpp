#pragma once
// The actor system's scheduler for a serving node: CAF's work-stealing workers with a timer
// that sleeps until the earliest deadline and is woken only when a new deadline comes before
// it. CAF's own timer thread is woken by every delayed message and timeout it is given (and
// then again when it is due): at 1,000 streams the engines' steps alone give it about 400
// such messages a second, each a futex call on the sender's thread and two context switches
// on the timer's. Here a new deadline costs the sender a lock and a map insert.
//
// With several workers the timer is a thread of its own. A lone worker (the default on two
// cores) keeps the deadlines itself: it delivers what is due each time it looks for its next
// job and, idle, blocks only until the next deadline, so an engine step's end is one wakeup
// of the worker rather than one of a timer thread that then wakes the worker.
#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>

#include <caf/actor_system_config.hpp>

namespace boost::asio { class io_context; }

namespace kiln::cluster {

/// An io_context run by the lone actor worker itself (`server.actors_on_io_thread`): between
/// its jobs, and while it has none, the worker runs the front's I/O, so a request reaches the
/// actors and a step's tokens reach the sockets without waking another thread.
class io_sharing {
 public:
  explicit io_sharing(boost::asio::io_context& ioc) : ioc(ioc) {}
  boost::asio::io_context& ioc;
  /// After `ioc.stop()`: waits until the worker has left the io_context (its last handler done).
  void wait_released();
  void released();  ///< the worker
  /// True on the worker while the io_context runs (not stopped): what the front's handlers
  /// touch may be touched here, between them.
  bool here() const;
  void worker_started() { worker_.store(std::this_thread::get_id(), std::memory_order_relaxed); }  ///< the worker
 private:
  std::atomic<std::thread::id> worker_{};
  std::mutex mx_;
  std::condition_variable cv_;
  bool released_ = false;
};

/// Makes `cfg`'s actor systems use that scheduler (work stealing, as CAF's default); the
/// lone-worker form where `scheduler.max-threads` is 1, which then also runs `io` if given.
void use_lazy_timer_scheduler(caf::actor_system_config& cfg, std::shared_ptr<io_sharing> io = nullptr);

}  // namespace kiln::cluster
