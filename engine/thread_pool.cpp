#include "engine/thread_pool.hpp"

#include <algorithm>

namespace kiln::engine {

namespace {

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
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

void thread_pool::work(std::size_t index) {
  std::size_t seen = 0;
  while (true) {
    std::unique_lock lock(mu_);
    wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
    if (stop_) return;
    seen = generation_;
    const auto* job = job_;
    const auto [b, e] = share(n_, workers_.size() + 1, index);
    lock.unlock();
    if (b < e) (*job)(b, e);
    lock.lock();
    if (--pending_ == 0) done_.notify_one();
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
    pending_ = workers_.size();
    ++generation_;
  }
  wake_.notify_all();
  const auto [b, e] = share(n, workers_.size() + 1, 0);
  if (b < e) fn(b, e);
  std::unique_lock lock(mu_);
  done_.wait(lock, [&] { return pending_ == 0; });
}

}  // namespace kiln::engine
