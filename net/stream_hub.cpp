#include "net/stream_hub.hpp"

#include <algorithm>
#include <unordered_map>
#include <utility>
#include <vector>

#include <caf/all.hpp>

namespace kiln::net {

namespace {

struct hub_attach_msg {
  actors::request_id id;
  std::shared_ptr<actors::stream_target> target;
  run_fn on_strand;
};
struct hub_detach_msg {
  actors::request_id id;
};

}  // namespace

}  // namespace kiln::net

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kiln::net::hub_attach_msg)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kiln::net::hub_detach_msg)

namespace kiln::net {

namespace {

struct hub_state {
  struct entry {
    std::shared_ptr<actors::stream_target> target;
    run_fn on_strand;
  };
  std::unordered_map<actors::request_id, entry, actors::request_id_hash> streams;
  run_fn post_io;
  bool one_io_thread = true;
  static inline const char* name = "kiln.stream_hub";

  /// With one I/O thread a batch carries its targets as plain pointers (no reference count
  /// touched by two threads per stream per step); the hub's own reference is therefore let
  /// go on the I/O thread, after every batch posted before it.
  void release_on_io(std::shared_ptr<actors::stream_target> t) {
    if (one_io_thread && t) post_io([t = std::move(t)] {});
  }
  hub_state() = default;
  hub_state(const hub_state&) = delete;
  hub_state& operator=(const hub_state&) = delete;
  ~hub_state() {
    // The io_context outlives the actor system (node.cpp), so this post is safe; batches
    // still queued there run before it.
    if (!one_io_thread || streams.empty() || !post_io) return;
    std::vector<std::shared_ptr<actors::stream_target>> held;
    held.reserve(streams.size());
    for (auto& [id, e] : streams) held.push_back(std::move(e.target));
    post_io([held = std::move(held)] {});
  }
};

using stateful = caf::stateful_actor<hub_state>;
using target_ptr = std::shared_ptr<actors::stream_target>;

// Calls `each` with a step's first tokens before the others: their clients are waiting for
// them (time to first token), the rest only get one more token each. An engine's plan puts
// its decodes before the prompts it finishes, so its first tokens come last in a batch. A
// stream has one item per step, so each stream's own order is kept.
template <class F>
void firsts_first(std::vector<actors::stream_tokens>& items, F&& each) {
  for (auto& ev : items)
    if (ev.prompt_tokens >= 0) each(ev);
  for (auto& ev : items)
    if (ev.prompt_tokens < 0) each(ev);
}

// A step's tokens: one post for the whole batch on one I/O thread; else one per stream.
void deliver(stateful* self, std::vector<actors::stream_tokens>& items) {
  auto& st = self->state;
  if (st.one_io_thread) {
    // Plain pointers: each target lives until a job posted after this one (release_on_io).
    std::vector<std::pair<actors::stream_target*, actors::stream_tokens>> work;
    work.reserve(items.size());
    firsts_first(items, [&](actors::stream_tokens& ev) {
      if (auto it = st.streams.find(ev.id); it != st.streams.end()) work.emplace_back(it->second.target.get(), std::move(ev));
    });
    if (work.empty()) return;
    st.post_io([work = std::move(work)]() mutable {
      // Each stream's objects are cold by its next step: while one stream is written, the
      // next ones' are loaded a link at a time (object, its fields and exchange, the
      // connection, the connection's buffer and socket), each link one stream further ahead.
      const std::size_t n = work.size();
      constexpr std::size_t kAhead = 4;
      for (std::size_t i = 0; i < std::min(n, kAhead); ++i) __builtin_prefetch(work[i].first);
      for (std::size_t i = 0; i < n; ++i) {
        if (i + kAhead < n) __builtin_prefetch(work[i + kAhead].first);
        for (int depth = 1; depth < static_cast<int>(kAhead); ++depth)
          if (i + kAhead - depth < n) work[i + kAhead - depth].first->warm(depth);
        work[i].first->on_tokens(std::move(work[i].second));
      }
    });
    return;
  }
  firsts_first(items, [&](actors::stream_tokens& ev) {
    auto it = st.streams.find(ev.id);
    if (it == st.streams.end()) return;
    it->second.on_strand([t = it->second.target, ev = std::move(ev)]() mutable { t->on_tokens(std::move(ev)); });
  });
}

// One event for one stream, in order with its tokens; `last` ends the stream here.
template <class Ev>
void one(stateful* self, Ev ev, void (actors::stream_target::*fn)(Ev), bool last) {
  auto& st = self->state;
  auto it = st.streams.find(ev.id);
  if (it == st.streams.end()) return;
  // The last event takes the hub's reference with it, so the target outlives every batch
  // posted before it.
  target_ptr t = last ? std::move(it->second.target) : it->second.target;
  auto job = [t = std::move(t), fn, ev = std::move(ev)]() mutable { ((*t).*fn)(std::move(ev)); };
  if (st.one_io_thread) st.post_io(std::move(job));
  else it->second.on_strand(std::move(job));
  if (last) st.streams.erase(it);
}

caf::behavior stream_hub(stateful* self, run_fn post_io, bool one_io_thread) {
  self->state.post_io = std::move(post_io);
  self->state.one_io_thread = one_io_thread;
  return {
      [self](hub_attach_msg& a) {
        auto& e = self->state.streams[a.id];
        self->state.release_on_io(std::move(e.target));  // an id attached again replaces its target
        e = {std::move(a.target), std::move(a.on_strand)};
      },
      [self](hub_detach_msg& d) {
        auto& st = self->state;
        auto it = st.streams.find(d.id);
        if (it == st.streams.end()) return;
        st.release_on_io(std::move(it->second.target));
        st.streams.erase(it);
      },
      [self](actors::stream_tokens& ev) {
        std::vector<actors::stream_tokens> one_item;
        one_item.push_back(std::move(ev));
        deliver(self, one_item);
      },
      [self](actors::stream_batch& b) { deliver(self, b.items); },
      [self](actors::stream_end& ev) { one(self, std::move(ev), &actors::stream_target::on_end, true); },
      [self](actors::stream_error& ev) { one(self, std::move(ev), &actors::stream_target::on_error, true); },
      [self](actors::rate_limit_info& ev) { one(self, ev, &actors::stream_target::on_rate_limit, false); },
  };
}

}  // namespace

caf::actor spawn_stream_hub(caf::actor_system& sys, run_fn post_io, bool one_io_thread) {
  return sys.spawn(stream_hub, std::move(post_io), one_io_thread);
}

void hub_attach(const caf::actor& hub, const actors::request_id& id, std::shared_ptr<actors::stream_target> target,
                run_fn on_strand) {
  caf::anon_send(hub, hub_attach_msg{id, std::move(target), std::move(on_strand)});
}

void hub_detach(const caf::actor& hub, const actors::request_id& id) { caf::anon_send(hub, hub_detach_msg{id}); }

caf::actor spawn_client_handle(caf::actor_system& sys) {
  return sys.spawn([](caf::event_based_actor*) -> caf::behavior { return {[](caf::unit_t) {}}; });
}

void end_client_handle(const caf::actor& client) {
  if (client) caf::anon_send_exit(client, caf::exit_reason::user_shutdown);
}

}  // namespace kiln::net
