#include "net/stream_hub.hpp"

#include "net/io_lane.hpp"

#include <algorithm>
#include <unordered_map>
#include <utility>
#include <vector>

#include <caf/all.hpp>

#include "actors/one_way.hpp"

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
    io_lane::seq last = 0;  ///< with one I/O thread: its last item in the lane
  };
  std::unordered_map<actors::request_id, entry, actors::request_id_hash> streams;
  std::shared_ptr<io_lane> lane;  ///< with one I/O thread
  static inline const char* name = "kiln.stream_hub";

  bool one_io_thread() const { return lane != nullptr; }

  /// With one I/O thread a batch carries its targets as plain pointers (no reference count
  /// touched by two threads per stream per step); the hub's own reference is therefore let
  /// go on the I/O thread, after everything handed on before it (at once where the hub runs
  /// there and nothing of the stream waits).
  void release_on_io(std::shared_ptr<actors::stream_target> t, io_lane::seq last) {
    if (!lane || !t) return;
    if (lane->runs_now(last)) return;  // the last reference goes here and now
    lane->push([t = std::move(t)] {});
  }
  hub_state() = default;
  hub_state(const hub_state&) = delete;
  hub_state& operator=(const hub_state&) = delete;
  ~hub_state() {
    // The io_context outlives the actor system (node.cpp), so this is safe; what waits in the
    // lane runs before it.
    if (!lane || streams.empty()) return;
    std::vector<std::shared_ptr<actors::stream_target>> held;
    held.reserve(streams.size());
    for (auto& [id, e] : streams) held.push_back(std::move(e.target));
    lane->push([held = std::move(held)] {});
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

// A step's tokens: into the lane to the one I/O thread (a first token ahead of what waits there,
// where nothing of its own stream still waits); where the hub runs on the I/O thread itself,
// every such stream's tokens are written at once. With several I/O threads, one post per
// stream to its strand.
void deliver(stateful* self, std::vector<actors::stream_tokens>& items) {
  auto& st = self->state;
  if (st.one_io_thread()) {
    // Plain pointers: each target lives until a job pushed after this one (release_on_io).
    std::vector<io_lane::item> ordered, firsts;
    std::vector<hub_state::entry*> owners;  // ordered[i]'s stream
    ordered.reserve(items.size());
    owners.reserve(items.size());
    const io_lane::seq done = st.lane->done();
    const bool here = st.lane->here();
    firsts_first(items, [&](actors::stream_tokens& ev) {
      auto it = st.streams.find(ev.id);
      if (it == st.streams.end()) return;
      auto& e = it->second;
      if ((here || ev.prompt_tokens >= 0) && e.last <= done) {
        firsts.push_back({e.target.get(), std::move(ev), {}});
        return;
      }
      ordered.push_back({e.target.get(), std::move(ev), {}});
      owners.push_back(&e);
    });
    if (here) {
      io_lane::run_now(firsts);  // sends on the I/O thread: nothing of these streams waits
      firsts.clear();
    }
    if (ordered.empty() && firsts.empty()) return;
    const io_lane::seq base = st.lane->push(std::move(ordered), std::move(firsts));
    for (std::size_t i = 0; i < owners.size(); ++i) owners[i]->last = base + i;
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
  if (!st.one_io_thread()) it->second.on_strand(std::move(job));
  else if (st.lane->runs_now(it->second.last)) job();
  else it->second.last = st.lane->push(std::move(job));
  if (last) st.streams.erase(it);
}

caf::behavior stream_hub(stateful* self, run_fn post_io, bool one_io_thread, std::function<bool()> on_io_thread) {
  if (one_io_thread) self->state.lane = std::make_shared<io_lane>(std::move(post_io), std::move(on_io_thread));
  return {
      [self](hub_attach_msg& a) {
        auto& e = self->state.streams[a.id];
        self->state.release_on_io(std::move(e.target), e.last);  // an id attached again replaces its target
        e = {std::move(a.target), std::move(a.on_strand)};
      },
      [self](hub_detach_msg& d) {
        auto& st = self->state;
        auto it = st.streams.find(d.id);
        if (it == st.streams.end()) return;
        st.release_on_io(std::move(it->second.target), it->second.last);
        st.streams.erase(it);
      },
      // The streams' own messages, one-way: see actors/one_way.hpp.
      [self](actors::stream_tokens& ev) -> actors::one_way {
        std::vector<actors::stream_tokens> one_item;
        one_item.push_back(std::move(ev));
        deliver(self, one_item);
        return actors::handled;
      },
      [self](actors::stream_batch& b) -> actors::one_way {
        deliver(self, b.items);
        return actors::handled;
      },
      [self](actors::stream_end& ev) -> actors::one_way {
        one(self, std::move(ev), &actors::stream_target::on_end, true);
        return actors::handled;
      },
      [self](actors::stream_error& ev) -> actors::one_way {
        one(self, std::move(ev), &actors::stream_target::on_error, true);
        return actors::handled;
      },
      [self](actors::rate_limit_info& ev) -> actors::one_way {
        one(self, ev, &actors::stream_target::on_rate_limit, false);
        return actors::handled;
      },
  };
}

}  // namespace

caf::actor spawn_stream_hub(caf::actor_system& sys, run_fn post_io, bool one_io_thread, std::function<bool()> on_io_thread) {
  return sys.spawn(stream_hub, std::move(post_io), one_io_thread, std::move(on_io_thread));
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
