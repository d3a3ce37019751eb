#pragma once
// A fixed set of worker threads for the CPU executor's parallel loops. The calling thread
// takes a share of every loop, so a pool of n threads starts n - 1 workers. A step issues
// dozens of loops back to back, so workers spin briefly on the next loop before sleeping.
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace kiln::engine {

class thread_pool {
 public:
  explicit thread_pool(int threads);
  ~thread_pool();
  thread_pool(const thread_pool&) = delete;
  thread_pool& operator=(const thread_pool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }
  /// Calls fn(begin, end) on contiguous parts of [0, n), one per thread, and waits for all.
  void parallel_for(std::size_t n, const std::function<void(std::size_t, std::size_t)>& fn);

 private:
  void work(std::size_t index);

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable wake_, done_;
  const std::function<void(std::size_t, std::size_t)>* job_ = nullptr;
  std::size_t n_ = 0;
  std::atomic<std::size_t> generation_{0};
  std::atomic<int> pending_{0};
  bool stop_ = false;
};

}  // namespace kiln::engine
