#pragma once
// One thread that runs an engine's steps, one at a time, so the thread that asked (an actor)
// never waits on a forward pass or a GPU.
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

namespace kiln::engine {

class step_worker {
 public:
  step_worker();
  ~step_worker();
  step_worker(const step_worker&) = delete;
  step_worker& operator=(const step_worker&) = delete;

  /// Runs `job` on the worker; the previous job must have finished.
  void post(std::function<void()> job);
  /// Blocks until the posted job has finished (at once when it has).
  void wait();

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::function<void()> job_;
  bool busy_ = false;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace kiln::engine
