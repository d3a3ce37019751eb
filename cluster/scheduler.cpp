#include "cluster/scheduler.hpp"

#include <pthread.h>

#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/detail/thread_safe_actor_clock.hpp>
#include <caf/policy/work_stealing.hpp>
#include <caf/scheduler/coordinator.hpp>

namespace kiln::cluster {

namespace {

// CAF's scheduler hands out its clock as a thread_safe_actor_clock, so this derives from it;
// it keeps only the bookkeeping (the schedule and its lookup) of the simple clock beneath and
// guards it with its own lock instead of the queue to the timer thread.
class lazy_clock final : public caf::detail::thread_safe_actor_clock {
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
  // A cancellation never needs the timer thread awake: what it removes simply does not fire.
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
    std::lock_guard<std::mutex> guard{mx_};
    base::cancel_all();  // what never came due lets go of its actors
  }

 private:
  template <class F>
  void add(F&& f) {
    bool wake;
    {
      std::lock_guard<std::mutex> guard{mx_};
      f();
      wake = schedule_.begin()->first < sleeping_until_;
    }
    if (wake) cv_.notify_one();
  }

  void run() {
    std::vector<std::unique_ptr<delayed_event>> due;
    std::unique_lock<std::mutex> guard{mx_};
    while (!stopping_) {
      const auto t = now();
      while (!schedule_.empty() && schedule_.begin()->first <= t) {
        auto i = schedule_.begin();
        auto ptr = std::move(i->second);
        if (ptr->backlink != actor_lookup_.end()) actor_lookup_.erase(ptr->backlink);
        schedule_.erase(i);
        due.push_back(std::move(ptr));
      }
      if (!due.empty()) {
        // Delivered without the lock, in deadline order: only this thread delivers.
        guard.unlock();
        for (auto& e : due) ship(*e);
        due.clear();
        guard.lock();
        continue;
      }
      if (schedule_.empty()) {
        sleeping_until_ = time_point::max();
        cv_.wait(guard);
      } else {
        sleeping_until_ = schedule_.begin()->first;
        cv_.wait_until(guard, sleeping_until_);
      }
      sleeping_until_ = time_point::min();  // awake: whatever arrives is seen before it sleeps
    }
  }

  std::mutex mx_;
  std::condition_variable cv_;
  time_point sleeping_until_ = time_point::min();
  bool stopping_ = false;
  std::thread thread_;
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

}  // namespace

void use_lazy_timer_scheduler(caf::actor_system_config& cfg) {
  cfg.module_factories.push_back([](caf::actor_system& sys) -> caf::actor_system::module* {
    return new lazy_timer_coordinator(sys);
  });
}

}  // namespace kiln::cluster
