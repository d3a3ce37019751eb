#include "engine/step_worker.hpp"

#include <pthread.h>

namespace kiln::engine {

step_worker::step_worker() {
  thread_ = std::thread([this] {
    // Named for itself (a new thread takes its creator's name: often the actor or I/O thread's),
    // so each thread's CPU in /proc is what its name says.
    ::pthread_setname_np(::pthread_self(), "kiln.step");
    std::unique_lock lock(mu_);
    while (true) {
      cv_.wait(lock, [&] { return stop_ || job_; });
      if (!job_) return;  // stopping with nothing left to run
      auto job = std::move(job_);
      job_ = nullptr;
      lock.unlock();
      job();
      lock.lock();
      busy_ = false;
      cv_.notify_all();
    }
  });
}

step_worker::~step_worker() {
  {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return !busy_; });
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void step_worker::post(std::function<void()> job) {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return !busy_; });
  busy_ = true;
  job_ = std::move(job);
  cv_.notify_all();
}

void step_worker::wait() {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return !busy_; });
}

}  // namespace kiln::engine
