#pragma once
// A publication point: one writer replaces the value whole, readers take the current one
// (an immutable snapshot they may keep). Not state the actors share: nobody changes a value
// in place.
#include <memory>
#include <mutex>

namespace kiln::config {

template <class T>
class board {
 public:
  explicit board(T t = {}) : current_(std::make_shared<const T>(std::move(t))) {}
  std::shared_ptr<const T> get() const {
    std::lock_guard lock(mu_);
    return current_;
  }
  void set(T t) {
    auto next = std::make_shared<const T>(std::move(t));
    std::lock_guard lock(mu_);
    current_ = std::move(next);
  }

 private:
  mutable std::mutex mu_;
  std::shared_ptr<const T> current_;
};

}  // namespace kiln::config
