#include "net/io_lane.hpp"

#include <algorithm>
#include <utility>

namespace kiln::net {

io_lane::seq io_lane::push(std::vector<item> ordered, std::vector<item> firsts) {
  bool post = false;
  seq base;
  {
    std::lock_guard<std::mutex> guard{mx_};
    base = next_seq_;
    next_seq_ += ordered.size();
    if (!ordered.empty()) ordered_.push_back(chunk{std::move(ordered), 0, base});
    if (firsts_.empty()) firsts_ = std::move(firsts);
    else std::move(firsts.begin(), firsts.end(), std::back_inserter(firsts_));
    if (!scheduled_ && (!ordered_.empty() || !firsts_.empty())) post = scheduled_ = true;
  }
  if (post) post_([self = shared_from_this()] { self->run(); });
  return base;
}

io_lane::seq io_lane::push(std::function<void()> job) {
  std::vector<item> one(1);
  one[0].job = std::move(job);
  return push(std::move(one));
}

// Each stream's objects are cold by its next step: while one stream is written, the next
// ones' are loaded a link at a time (object, its fields and exchange, the connection, the
// connection's buffer and socket), each link one stream further ahead.
void io_lane::run_items(item* begin, item* end) {
  constexpr std::ptrdiff_t kAhead = 4;
  const std::ptrdiff_t n = end - begin;
  for (std::ptrdiff_t i = 0; i < std::min(n, kAhead); ++i)
    if (begin[i].target) __builtin_prefetch(begin[i].target);
  for (std::ptrdiff_t i = 0; i < n; ++i) {
    if (i + kAhead < n && begin[i + kAhead].target) __builtin_prefetch(begin[i + kAhead].target);
    for (std::ptrdiff_t depth = 1; depth < kAhead; ++depth)
      if (i + kAhead - depth < n && begin[i + kAhead - depth].target)
        begin[i + kAhead - depth].target->warm(static_cast<int>(depth));
    item& it = begin[i];
    if (it.job) {
      auto job = std::move(it.job);
      job();  // destroyed here, as an io_context destroys a handler once it has run
    } else {
      it.target->on_tokens(std::move(it.tokens));
    }
  }
}

void io_lane::run() {
  std::vector<item> firsts;
  chunk* c = nullptr;
  std::size_t from = 0, to = 0;
  {
    std::lock_guard<std::mutex> guard{mx_};
    firsts.swap(firsts_);
    if (!ordered_.empty()) {
      c = &ordered_.front();  // stays put while the hub appends behind it
      from = c->next;
      to = std::min(c->items.size(), from + kSlice);
    }
  }
  run_items(firsts.data(), firsts.data() + firsts.size());
  if (c != nullptr) run_items(c->items.data() + from, c->items.data() + to);
  bool more;
  {
    std::lock_guard<std::mutex> guard{mx_};
    if (c != nullptr) {
      c->next = to;
      done_.store(c->base + to - 1, std::memory_order_release);
      if (to == c->items.size()) ordered_.pop_front();
    }
    more = !ordered_.empty() || !firsts_.empty();
    scheduled_ = more;
  }
  // Again behind what the I/O thread has meanwhile been given (reads, finished writes).
  if (more) post_([self = shared_from_this()] { self->run(); });
}

}  // namespace kiln::net
