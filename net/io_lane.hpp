#pragma once
// The way from the stream hub (an actor thread) to the one I/O thread. Everything for the
// streams (step batches, ends, errors, limits, the hub letting go of a stream) waits here in
// the order the hub gave it, and one runner on the I/O thread works through it a slice at a
// time, posting itself again between slices, so that the I/O thread reads requests and
// finishes writes between them rather than after a backlog of whole batches (twelve engines
// ending their steps at once are about 1,200 writes, 9 ms).
//
// A stream's first token may pass everything waiting: a client waits for it (time to first
// token), the others only get one more token each. It passes only where nothing earlier for
// its own stream still waits, so each stream's events keep their order.
#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "actors/stream_sink.hpp"

namespace kiln::net {

class io_lane : public std::enable_shared_from_this<io_lane> {
 public:
  /// Streams written per slice: about 0.3 ms of sends.
  static constexpr std::size_t kSlice = 32;

  /// One stream's tokens (the target lives until a job pushed after this one has run), or a job.
  struct item {
    actors::stream_target* target = nullptr;
    actors::stream_tokens tokens;
    std::function<void()> job;
  };
  /// Sequence numbers of pushed items, from 1; 0 is "nothing".
  using seq = std::uint64_t;

  /// `post` puts a function on the I/O thread's queue; `here` (optional) says whether the
  /// caller is on the I/O thread while it runs (the actors on the I/O thread), where the hub
  /// may run what nothing earlier of its stream waits for at once, without the lane.
  explicit io_lane(std::function<void(std::function<void()>)> post, std::function<bool()> here = nullptr)
      : post_(std::move(post)), here_(std::move(here)) {}

  bool here() const { return here_ && here_(); }
  /// Whether what a stream whose last item is `last` hands on may run now, here: nothing of it
  /// waits in the lane and the caller is on the I/O thread.
  bool runs_now(seq last) const { return last <= done() && here(); }
  /// On the I/O thread (`here`): runs `items` now, in their order.
  static void run_now(std::vector<item>& items) { run_items(items.data(), items.data() + items.size()); }

  /// Hub side: `ordered` after everything pushed before, `firsts` ahead of whatever still waits.
  /// Returns the sequence number of ordered[0] (the others follow one by one).
  seq push(std::vector<item> ordered, std::vector<item> firsts = {});
  seq push(std::function<void()> job);

  /// The last ordered item that has run: a stream whose own last item is at or before it has
  /// nothing left waiting, so its first token may pass the rest.
  seq done() const { return done_.load(std::memory_order_acquire); }

 private:
  struct chunk {
    std::vector<item> items;
    std::size_t next = 0;  ///< the first not yet run
    seq base = 0;          ///< items[0]'s number
  };

  void run();  // the I/O thread: one slice
  static void run_items(item* begin, item* end);

  std::function<void(std::function<void()>)> post_;
  std::function<bool()> here_;
  std::mutex mx_;
  std::deque<chunk> ordered_;   // the runner keeps a reference to front() across its slice
  std::vector<item> firsts_;
  seq next_seq_ = 1;
  bool scheduled_ = false;      // a runner is posted or running
  std::atomic<seq> done_{0};
};

}  // namespace kiln::net
