#include "engine/thread_pool.hpp"

#include <algorithm>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace kiln::engine {

namespace {

constexpr int kSpins = 20000;  // a few tens of microseconds before sleeping

void relax() {
#if defined(__x86_64__)
  _mm_pause();
#endif
}

std::pair<std::size_t, std::size_t> share(std::size_t n, std::size_t parts, std::size_t i) {
  const std::size_t base = n / parts, extra = n % parts;
  const std::size_t begin = i * base + std::min(i, extra);
  return {begin, begin + base + (i < extra ? 1 : 0)};
}

}  // namespace

thread_pool::thread_pool(int threads) {
  for (int i = 1; i < std::max(1, threads); ++i) workers_.emplace_back([this, i] { work(static_cast<std::size_t>(i)); });
}

thread_pool::~thread_pool() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
    generation_.fetch_add(1, std::memory_order_release);
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

void thread_pool::work(std::size_t index) {
  std::size_t seen = 0;
  while (true) {
    // Spin for the next loop, then sleep until one is posted.
    int spins = 0;
    while (generation_.load(std::memory_order_acquire) == seen && ++spins < kSpins) relax();
    if (generation_.load(std::memory_order_acquire) == seen) {
      std::unique_lock lock(mu_);
      wake_.wait(lock, [&] { return generation_.load(std::memory_order_acquire) != seen; });
    }
    seen = generation_.load(std::memory_order_acquire);
    const std::function<void(std::size_t, std::size_t)>* job;
    std::size_t n;
    {
      std::lock_guard lock(mu_);
      if (stop_) return;
      job = job_;
      n = n_;
    }
    const auto [b, e] = share(n, workers_.size() + 1, index);
    if (b < e) (*job)(b, e);
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      std::lock_guard lock(mu_);
      done_.notify_one();
    }
  }
}

void thread_pool::parallel_for(std::size_t n, const std::function<void(std::size_t, std::size_t)>& fn) {
  if (workers_.empty() || n < 2) {
    if (n > 0) fn(0, n);
    return;
  }
  {
    std::lock_guard lock(mu_);
    job_ = &fn;
    n_ = n;
    pending_.store(static_cast<int>(workers_.size()), std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_release);
  }
  wake_.notify_all();
  const auto [b, e] = share(n, workers_.size() + 1, 0);
  if (b < e) fn(b, e);
  int spins = 0;
  while (pending_.load(std::memory_order_acquire) != 0 && ++spins < kSpins) relax();
  if (pending_.load(std::memory_order_acquire) != 0) {
    std::unique_lock lock(mu_);
    done_.wait(lock, [&] { return pending_.load(std::memory_order_acquire) == 0; });
  }
}

}  // namespace kiln::engine
