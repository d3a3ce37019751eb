#include "cluster/scheduler.hpp"

#include <pthread.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/config_value.hpp>
#include <caf/defaults.hpp>
#include <caf/detail/thread_safe_actor_clock.hpp>
#include <caf/policy/work_stealing.hpp>
#include <caf/scheduler/coordinator.hpp>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

namespace kiln::cluster {

namespace {

// CAF's scheduler hands out its clock as a thread_safe_actor_clock, so this derives from it;
// it keeps only the bookkeeping (the schedule and its lookup) of the simple clock beneath and
// guards it with its own lock instead of the queue to CAF's timer thread. Who waits for the
// deadlines (a timer thread, or the lone worker between jobs) is the subclass's part: it
// learns of a deadline sooner than the one it sleeps until through `wake`.
class deadline_clock : public caf::detail::thread_safe_actor_clock {
 public:
  using base = caf::detail::simple_actor_clock;

  void set_ordinary_timeout(time_point t, caf::abstract_actor* self, caf::atom_value type, uint64_t id) override {
    add([&] { base::set_ordinary_timeout(t, self, type, id); });
  }
  void set_request_timeout(time_point t, caf::abstract_actor* self, caf::message_id id) override {
    add([&] { base::set_request_timeout(t, self, id); });
  }
  void set_multi_timeout(time_point t, caf::abstract_actor* self, caf::atom_value type, uint64_t id) override {
    add([&] { base::set_multi_timeout(t, self, type, id); });
  }
  void schedule_message(time_point t, caf::strong_actor_ptr receiver, caf::mailbox_element_ptr content) override {
    add([&] { base::schedule_message(t, std::move(receiver), std::move(content)); });
  }
  void schedule_message(time_point t, caf::group target, caf::strong_actor_ptr sender, caf::message content) override {
    add([&] { base::schedule_message(t, std::move(target), std::move(sender), std::move(content)); });
  }
  // A cancellation never needs the waiter awake: what it removes simply does not fire.
  void cancel_ordinary_timeout(caf::abstract_actor* self, caf::atom_value type) override {
    std::lock_guard<std::mutex> guard{mx_};
    base::cancel_ordinary_timeout(self, type);
  }
  void cancel_request_timeout(caf::abstract_actor* self, caf::message_id id) override {
    std::lock_guard<std::mutex> guard{mx_};
    base::cancel_request_timeout(self, id);
  }
  void cancel_timeouts(caf::abstract_actor* self) override {
    std::lock_guard<std::mutex> guard{mx_};
    base::cancel_timeouts(self);
  }
  void cancel_all() override {
    std::lock_guard<std::mutex> guard{mx_};
    base::cancel_all();
  }

 protected:
  /// A deadline came before the one the waiter sleeps until; called without the lock.
  virtual void wake() = 0;
  /// A deadline was added; called with the lock held.
  virtual void added() {}

  /// Takes what is due at `t` out of the schedule into `due` (in deadline order); the lock held.
  void take_due(time_point t, std::vector<std::unique_ptr<delayed_event>>& due) {
    while (!schedule_.empty() && schedule_.begin()->first <= t) {
      auto i = schedule_.begin();
      auto ptr = std::move(i->second);
      if (ptr->backlink != actor_lookup_.end()) actor_lookup_.erase(ptr->backlink);
      schedule_.erase(i);
      due.push_back(std::move(ptr));
    }
  }
  time_point next_deadline() const { return schedule_.empty() ? time_point::max() : schedule_.begin()->first; }

  std::mutex mx_;
  time_point sleeping_until_ = time_point::min();  ///< guarded by mx_; min: awake, sees all

 private:
  template <class F>
  void add(F&& f) {
    bool sooner;
    {
      std::lock_guard<std::mutex> guard{mx_};
      f();
      added();
      sooner = schedule_.begin()->first < sleeping_until_;
    }
    if (sooner) wake();
  }
};

// A timer thread of its own, for schedulers with several workers.
class lazy_clock final : public deadline_clock {
 public:
  void start(caf::actor_system& sys) {
    thread_ = std::thread([this, &sys] {
      pthread_setname_np(pthread_self(), "kiln.timer");
      sys.thread_started();
      run();
      sys.thread_terminates();
    });
  }

  void stop() {
    {
      std::lock_guard<std::mutex> guard{mx_};
      stopping_ = true;
    }
    cv_.notify_one();
    if (thread_.joinable()) thread_.join();
    cancel_all();  // what never came due lets go of its actors
  }

 private:
  void wake() override { cv_.notify_one(); }

  void run() {
    std::vector<std::unique_ptr<delayed_event>> due;
    std::unique_lock<std::mutex> guard{mx_};
    while (!stopping_) {
      take_due(now(), due);
      if (!due.empty()) {
        // Delivered without the lock, in deadline order: only this thread delivers.
        guard.unlock();
        for (auto& e : due) ship(*e);
        due.clear();
        guard.lock();
        continue;
      }
      sleeping_until_ = next_deadline();
      if (sleeping_until_ == time_point::max()) cv_.wait(guard);
      else cv_.wait_until(guard, sleeping_until_);
      sleeping_until_ = time_point::min();  // awake: whatever arrives is seen before it sleeps
    }
  }

  std::condition_variable cv_;
  bool stopping_ = false;
  std::thread thread_;
};

// Set on the lone worker's own thread: what it enqueues or schedules itself needs no wakeup.
thread_local bool on_lone_worker = false;

// No timer thread: the lone worker delivers what is due each time it looks for its next job,
// and when it has none it blocks only until the next deadline. A step's timer then costs one
// wakeup of the worker (at the deadline) instead of one of a timer thread, which in turn
// wakes the worker to run what it delivered.
class worker_clock final : public deadline_clock {
 public:
  /// Worker thread, before its first `arm`: its wait's lock and condition variable (CAF's,
  /// which new jobs signal). `wake` reads them only after an `arm`, which the lock orders.
  void attach(std::mutex* lock, std::condition_variable* cv, boost::asio::io_context* io) {
    if (wait_lock_ != nullptr) return;
    std::lock_guard<std::mutex> guard{mx_};
    wait_lock_ = lock;
    wait_cv_ = cv;
    io_ = io;
  }

  /// Worker thread: delivers every deadline that has passed by `t` (now), in deadline order.
  void ship_due(time_point t) {
    if (next_due_.load(std::memory_order_acquire) > t.time_since_epoch().count()) return;
    {
      std::lock_guard<std::mutex> guard{mx_};
      take_due(t, due_);
      publish_next();
    }
    for (auto& e : due_) ship(*e);  // without the lock: what it delivers may set new deadlines
    due_.clear();
  }

  /// Worker thread, before it blocks: until when it may sleep. From now until `disarm`, a
  /// sooner deadline sets `poked` and signals the worker's condition variable.
  time_point arm() {
    std::lock_guard<std::mutex> guard{mx_};
    poked_.store(false, std::memory_order_relaxed);
    sleeping_until_ = next_deadline();
    return sleeping_until_;
  }
  void disarm() {
    std::lock_guard<std::mutex> guard{mx_};
    sleeping_until_ = time_point::min();
    publish_next();
  }
  bool poked() const { return poked_.load(std::memory_order_acquire); }

  void stop() { cancel_all(); }  // the worker has ended: what never came due lets go of its actors

 private:
  void added() override { publish_next(); }
  void wake() override {
    poked_.store(true, std::memory_order_release);
    if (on_lone_worker) return;  // set while running an I/O handler: it looks again before it waits
    { std::lock_guard<std::mutex> guard{*wait_lock_}; }  // the worker is now waiting or will see the flag
    wait_cv_->notify_one();
    if (io_ != nullptr) boost::asio::post(*io_, [] {});  // ends a wait in the io_context
  }
  // After each change, so that a busy worker finds what is due without the lock.
  void publish_next() { next_due_.store(next_deadline().time_since_epoch().count(), std::memory_order_release); }

  std::atomic<time_point::rep> next_due_{time_point::min().time_since_epoch().count()};
  std::atomic<bool> poked_{false};
  std::mutex* wait_lock_ = nullptr;
  std::condition_variable* wait_cv_ = nullptr;
  boost::asio::io_context* io_ = nullptr;
  std::vector<std::unique_ptr<delayed_event>> due_;
};

// CAF's work stealing for one worker whose idle wait also keeps the clock (worker_clock).
//
// With an io_context to run (io_sharing) it waits in the io_context instead of on its
// condition variable, and runs the I/O handlers that are ready after every few jobs, or
// every fraction of a millisecond of long jobs (a step's writes), when it has many (all of
// them: the front falling behind the engines would only queue their tokens); so a new
// request is read soon even while the engines keep the worker busy.
struct lone_worker : caf::policy::work_stealing {
  static constexpr int kJobsPerIoTurn = 8;
  static constexpr auto kIoTurnEvery = std::chrono::microseconds(200);

  template <class Worker>
  caf::resumable* dequeue(Worker* self);

  template <class Worker>
  void external_enqueue(Worker* self, caf::resumable* job);
};

class lazy_timer_coordinator final : public caf::scheduler::coordinator<caf::policy::work_stealing> {
 public:
  using super = caf::scheduler::coordinator<caf::policy::work_stealing>;
  explicit lazy_timer_coordinator(caf::actor_system& sys) : super(sys) {}

  caf::detail::thread_safe_actor_clock& clock() noexcept override { return clock_; }

 protected:
  void start() override {
    clock_.start(system());
    super::start();
  }
  void stop() override {
    super::stop();  // the workers end first, as with CAF's own timer
    clock_.stop();
  }

 private:
  lazy_clock clock_;
};

class lone_worker_coordinator final : public caf::scheduler::coordinator<lone_worker> {
 public:
  using super = caf::scheduler::coordinator<lone_worker>;
  lone_worker_coordinator(caf::actor_system& sys, std::shared_ptr<io_sharing> io) : super(sys), io_(std::move(io)) {}

  caf::detail::thread_safe_actor_clock& clock() noexcept override { return clock_; }
  worker_clock& deadlines() { return clock_; }
  io_sharing* io() { return io_.get(); }

  /// The lone worker, waiting in the io_context: a timer (kernel timer, exact) at `until`. An
  /// io_context's own wait takes whole milliseconds, too coarse for an engine's steps.
  void wake_io_at(caf::actor_clock::time_point until) {
    if (until == io_wake_at_ && until > std::chrono::steady_clock::now()) return;  // set and not yet passed
    if (!io_timer_) io_timer_.emplace(io_->ioc);
    io_wake_at_ = until;
    io_timer_->expires_at(until);  // a wait for another time ends (aborted) and is replaced
    io_timer_->async_wait([](const boost::system::error_code&) {});
  }

 protected:
  void stop() override {
    super::stop();
    clock_.stop();
  }

 private:
  std::shared_ptr<io_sharing> io_;
  std::optional<boost::asio::steady_timer> io_timer_;  // the worker's alone
  caf::actor_clock::time_point io_wake_at_ = caf::actor_clock::time_point::min();
  worker_clock clock_;
};

template <class Worker>
void lone_worker::external_enqueue(Worker* self, caf::resumable* job) {
  auto& data = d(self);
  data.queue.append(job);
  if (on_lone_worker) return;  // the worker itself, in an I/O handler: it looks before it waits
  std::unique_lock<std::mutex> guard(data.waitdata.lock);
  if (!data.waitdata.sleeping) return;
  data.waitdata.cv.notify_one();
  if (auto* io = static_cast<lone_worker_coordinator*>(self->parent())->io()) boost::asio::post(io->ioc, [] {});
}

template <class Worker>
caf::resumable* lone_worker::dequeue(Worker* self) {
  auto* parent = static_cast<lone_worker_coordinator*>(self->parent());
  auto& clock = parent->deadlines();
  io_sharing* io = parent->io();
  auto& data = d(self);
  auto& queue = data.queue;
  auto& wait = data.waitdata;
  static thread_local int jobs_since_io = 0;
  static thread_local caf::actor_clock::time_point io_turn_at{};
  static thread_local bool left_io = false;
  if (!on_lone_worker) {
    on_lone_worker = true;
    if (io != nullptr) {
      pthread_setname_np(pthread_self(), "kiln.io");
      io->worker_started();
    }
  }
  clock.attach(&wait.lock, &wait.cv, io ? &io->ioc : nullptr);
  for (;;) {
    const auto now = clock.now();
    clock.ship_due(now);
    const bool run_io = io != nullptr && !io->ioc.stopped();
    if (io != nullptr && !run_io && !left_io) {
      left_io = true;
      io->released();
    }
    if (run_io && (++jobs_since_io >= kJobsPerIoTurn || now - io_turn_at >= kIoTurnEvery)) {
      jobs_since_io = 0;
      io_turn_at = now;
      io->ioc.poll();  // I/O gets a turn between jobs: what is ready now, and what that posts
      continue;
    }
    for (std::size_t i = 0; i < data.strategies[0].attempts; ++i)
      if (auto* job = queue.take_head()) return job;
    const auto until = clock.arm();
    if (run_io) {
      {
        std::unique_lock<std::mutex> guard{wait.lock};
        if (!queue.empty() || clock.poked()) {
          guard.unlock();
          clock.disarm();
          continue;
        }
        wait.sleeping = true;
      }
      // Runs one I/O handler, waiting in the io_context for one (or for the next deadline's timer).
      if (until != caf::actor_clock::time_point::max()) parent->wake_io_at(until);
      io->ioc.run_one();
      jobs_since_io = 0;
      io_turn_at = clock.now();
      {
        std::lock_guard<std::mutex> guard{wait.lock};
        wait.sleeping = false;
      }
      clock.disarm();
      continue;
    }
    {
      std::unique_lock<std::mutex> guard{wait.lock};
      wait.sleeping = true;
      auto ready = [&] { return !queue.empty() || clock.poked(); };
      if (until == caf::actor_clock::time_point::max()) wait.cv.wait(guard, ready);
      else wait.cv.wait_until(guard, until, ready);
      wait.sleeping = false;
    }
    clock.disarm();
  }
}

}  // namespace

bool io_sharing::here() const {
  return std::this_thread::get_id() == worker_.load(std::memory_order_relaxed) && !ioc.stopped();
}

void io_sharing::wait_released() {
  std::unique_lock<std::mutex> guard{mx_};
  cv_.wait(guard, [this] { return released_; });
}

void io_sharing::released() {
  {
    std::lock_guard<std::mutex> guard{mx_};
    released_ = true;
  }
  cv_.notify_all();
}

void use_lazy_timer_scheduler(caf::actor_system_config& cfg, std::shared_ptr<io_sharing> io) {
  cfg.module_factories.push_back([io](caf::actor_system& sys) -> caf::actor_system::module* {
    const auto threads = caf::get_or(sys.config(), "scheduler.max-threads", caf::defaults::scheduler::max_threads);
    if (threads == 1) return new lone_worker_coordinator(sys, io);
    return new lazy_timer_coordinator(sys);
  });
}

}  // namespace kiln::cluster
