#include "actors/loader.hpp"

#include <pthread.h>

#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

namespace kiln::actors {

namespace {

class thread_loader final : public loader {
 public:
  explicit thread_loader(int threads) {
    for (int i = 0; i < threads; ++i)
      threads_.emplace_back([this] {
        ::pthread_setname_np(::pthread_self(), "kiln.loader");  // not its creator's name (engine/step_worker.cpp)
        loop();
      });
  }
  ~thread_loader() override { stop(); }
  void run(std::function<void()> work) override {
    {
      std::lock_guard lock(mu_);
      if (stopped_) return;
      queue_.push_back(std::move(work));
    }
    cv_.notify_one();
  }
  void stop() override {
    {
      std::lock_guard lock(mu_);
      if (stopped_) return;
      stopping_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_)
      if (t.joinable()) t.join();
    std::lock_guard lock(mu_);
    stopped_ = true;
  }

 private:
  void loop() {
    for (;;) {
      std::function<void()> work;
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) return;
        work = std::move(queue_.front());
        queue_.pop_front();
      }
      work();
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  bool stopping_ = false;
  bool stopped_ = false;
  std::vector<std::thread> threads_;
};

class inline_loader final : public loader {
 public:
  void run(std::function<void()> work) override { work(); }
};

}  // namespace

std::shared_ptr<loader> make_thread_loader(int threads) { return std::make_shared<thread_loader>(threads); }
std::shared_ptr<loader> make_inline_loader() { return std::make_shared<inline_loader>(); }

}  // namespace kiln::actors
