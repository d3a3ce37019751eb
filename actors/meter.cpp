#include "actors/meter.hpp"

#include <algorithm>
#include <cstdio>

#include <caf/all.hpp>

#include "actors/node_supervisor.hpp"
#include "actors/one_way.hpp"
#include "actors/store_writer.hpp"

namespace kiln::actors::detail {
/// What the meter's thread reports back.
struct wal_replayed {
  std::vector<config::usage_record> records;
  std::vector<std::string> closed;  ///< segments holding them
  std::uint64_t noted = 0;          ///< the watermark last noted beside the log (a remote store)
};
struct wal_written {
  std::string error;
};
struct wal_rotated {
  std::vector<std::string> closed;
};
}  // namespace kiln::actors::detail

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kiln::actors::detail::wal_replayed)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kiln::actors::detail::wal_written)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kiln::actors::detail::wal_rotated)

namespace kiln::actors {

std::int64_t meter_state::minute_now(caf::actor_clock::time_point now) const {
  const auto since = std::chrono::duration_cast<std::chrono::seconds>(now - d.clock_at_start).count();
  return (d.unix_at_start + since) / 60;
}

namespace {

using stateful = caf::stateful_actor<meter_state>;
using flush_atom = caf::atom_constant<caf::atom("flush")>;
using fold_atom = caf::atom_constant<caf::atom("fold")>;
using refold_atom = caf::atom_constant<caf::atom("refold")>;

config::usage_record record_of(stateful* self, const usage_note& n) {
  auto& st = self->state;
  config::usage_record r;
  r.seq = st.next_seq++;
  r.id_origin = n.id.origin;
  r.id_seq = n.id.seq;
  r.team = n.team;
  r.model = n.model;
  r.version = n.version;
  r.minute = st.minute_now(self->clock().now());
  r.prompt_tokens = n.usage.prompt_tokens;
  r.cached_tokens = n.usage.cached_tokens;
  r.output_tokens = n.usage.completion_tokens;
  r.requests = n.ran ? 1 : 0;
  r.shed = n.ran ? 0 : 1;
  if (st.d.gauges)
    st.d.gauges->add_team_usage(r.team, r.model,
                                {static_cast<std::uint64_t>(r.prompt_tokens), static_cast<std::uint64_t>(r.cached_tokens),
                                 static_cast<std::uint64_t>(r.output_tokens), static_cast<std::uint64_t>(r.requests),
                                 static_cast<std::uint64_t>(r.shed)});
  return r;
}

void arm_flush(stateful* self) {
  auto& st = self->state;
  if (st.flush_armed || st.buffer.empty()) return;
  st.flush_armed = true;
  self->delayed_send(self, st.d.flush_every, flush_atom::value);
}

// One write of everything buffered; its ends leave when it is durable.
void flush(stateful* self) {
  auto& st = self->state;
  st.flush_armed = false;
  if (st.writing || st.buffer.empty() || !st.replayed) return arm_flush(self);
  st.writing = true;
  st.writing_batch = std::exchange(st.buffer, {});
  st.writing_ends = std::exchange(st.ends, {});
  st.thread->run([wal = st.wal, batch = st.writing_batch, handle = caf::actor_cast<caf::actor>(self)] {
    auto err = wal->append(batch);
    caf::anon_send(handle, detail::wal_written{err.value_or("")});
  });
}

void on_written(stateful* self, const detail::wal_written& w) {
  auto& st = self->state;
  st.writing = false;
  if (!w.error.empty()) std::fprintf(stderr, "kiln: usage log: %s\n", w.error.c_str());
  st.written += st.writing_batch.size();
  st.durable.insert(st.durable.end(), st.writing_batch.begin(), st.writing_batch.end());
  st.writing_batch.clear();
  for (auto& [sink, end] : st.writing_ends) self->send(sink, std::move(end));
  st.writing_ends.clear();
  arm_flush(self);
}

// Sends what is durable to the store (which folds it into rows); the segments go once the
// store has it.
void fold_now(stateful* self) {
  auto& st = self->state;
  if (st.folding || st.writing || st.durable.empty()) return;
  st.folding = true;
  st.folding_batch = std::exchange(st.durable, {});
  st.folding_through = 0;
  for (const auto& r : st.folding_batch) st.folding_through = std::max(st.folding_through, r.seq);
  // Close the open segment first: what it and the older ones hold is exactly the batch (no
  // write is in progress).
  st.thread->run([wal = st.wal, handle = caf::actor_cast<caf::actor>(self)] {
    caf::anon_send(handle, detail::wal_rotated{wal->rotate()});
  });
}

// The store did not take a fold (away: a control node on another node, say): its records stay
// in the log and are folded again every few seconds until it does; said once per outage.
void fold_failed(stateful* self, const std::string& why) {
  auto& st = self->state;
  st.folding = false;
  if (!st.fold_failing)
    std::fprintf(stderr, "kiln: usage fold failed (kept in the usage log, tried again every %lld s): %s\n",
                 static_cast<long long>(std::chrono::duration_cast<std::chrono::seconds>(st.d.refold_every).count()),
                 why.c_str());
  st.fold_failing = true;
  st.durable.insert(st.durable.begin(), st.folding_batch.begin(), st.folding_batch.end());
  st.folding_batch.clear();
  if (!st.refold_armed) {
    st.refold_armed = true;
    self->delayed_send(self, st.d.refold_every, refold_atom::value);
  }
}

// Sends the fold in progress; the store applies it once. A fold the store partly held already
// (its answer lost, or a node that restarted before it noted the watermark) comes back with
// the store's watermark: what that covers is dropped and the rest folded.
void send_fold(stateful* self) {
  auto& st = self->state;
  const caf::actor store = caf::actor_cast<caf::actor>(self->system().registry().get(store_name));
  if (!store) return fold_failed(self, "no store writer");
  std::uint64_t from = st.folding_through;
  for (const auto& r : st.folding_batch) from = std::min(from, r.seq);
  self->request(store, std::chrono::seconds(30), usage_fold{st.folding_batch, st.folding_through, from, st.d.ledger})
      .then(
          [self](std::uint64_t watermark) {
            auto& st = self->state;
            if (watermark < st.folding_through) {
              std::erase_if(st.folding_batch, [&](const config::usage_record& r) { return r.seq <= watermark; });
              return send_fold(self);
            }
            st.folding = false;
            if (st.fold_failing) std::fprintf(stderr, "kiln: usage fold: the store takes the usage log again\n");
            st.fold_failing = false;
            st.folded += st.folding_batch.size();
            st.folding_batch.clear();
            st.thread->run([wal = st.wal, closed = std::exchange(st.folding_closed, {}), through = st.folding_through,
                            mark = st.d.watermark_file] {
              // The note first: segments whose fold was not noted stay until the next fold.
              if (mark.empty() || config::write_watermark(mark, through)) wal->remove(closed);
            });
          },
          [self](caf::error& e) { fold_failed(self, self->system().render(e)); });
}

void on_rotated(stateful* self, detail::wal_rotated& r) {
  auto& st = self->state;
  st.folding_closed = std::move(r.closed);
  send_fold(self);
}

}  // namespace

caf::behavior meter(stateful* self, meter_deps deps) {
  auto& st = self->state;
  st.d = std::move(deps);
  st.wal = std::make_shared<config::usage_wal>(st.d.wal_prefix);
  st.thread = make_thread_loader(1);
  st.thread->run([wal = st.wal, handle = caf::actor_cast<caf::actor>(self), mark = st.d.watermark_file] {
    auto records = wal->read_all();
    const std::uint64_t noted = mark.empty() ? 0 : config::read_watermark(mark);
    caf::anon_send(handle, detail::wal_replayed{std::move(records), wal->rotate(), noted});
  });
  self->delayed_send(self, st.d.fold_every, fold_atom::value);
  // Stopping: what is buffered still goes to the log (the thread finishes it before it ends);
  // the store gets it at the next start.
  self->set_exit_handler([self](caf::exit_msg& em) {
    auto& st = self->state;
    if (!st.buffer.empty())
      st.thread->run([wal = st.wal, batch = std::exchange(st.buffer, {})] { wal->append(batch); });
    self->quit(em.reason);
  });
  return {
      [self](detail::wal_replayed& r) {
        auto& st = self->state;
        st.d.folded_seq = std::max(st.d.folded_seq, r.noted);
        std::uint64_t last = st.d.folded_seq;
        std::vector<config::usage_record> missing;
        for (auto& rec : r.records) {
          last = std::max(last, rec.seq);
          if (rec.seq > st.d.folded_seq) missing.push_back(std::move(rec));
        }
        // Numbering goes on past everything seen; records taken meanwhile are renumbered.
        st.next_seq = last + 1;
        for (auto& rec : st.buffer) rec.seq = st.next_seq++;
        st.replayed = true;
        if (!missing.empty()) std::fprintf(stderr, "kiln: usage log: replaying %zu records\n", missing.size());
        if (missing.empty()) st.thread->run([wal = st.wal, closed = r.closed] { wal->remove(closed); });
        else st.durable.insert(st.durable.begin(), missing.begin(), missing.end());
        arm_flush(self);
        fold_now(self);
      },
      // A request's own messages, one-way (actors/one_way.hpp).
      [self](usage_note& n) -> one_way {
        self->state.buffer.push_back(record_of(self, n));
        arm_flush(self);
        return handled;
      },
      [self](metered_end& m) -> one_way {
        auto& st = self->state;
        st.buffer.push_back(record_of(self, m.note));
        st.ends.emplace_back(std::move(m.sink), std::move(m.end));
        arm_flush(self);
        return handled;
      },
      [self](flush_atom) { flush(self); },
      [self](detail::wal_written& w) { on_written(self, w); },
      [self](detail::wal_rotated& r) { on_rotated(self, r); },
      [self](fold_now_atom) {
        if (self->state.replayed) fold_now(self);
      },
      [self](refold_atom) {
        auto& st = self->state;
        st.refold_armed = false;
        if (st.replayed) fold_now(self);
        if (!st.folding && !st.durable.empty() && !st.refold_armed) {  // a write was in progress
          st.refold_armed = true;
          self->delayed_send(self, st.d.refold_every, refold_atom::value);
        }
      },
      [self](fold_atom) {
        self->delayed_send(self, self->state.d.fold_every, fold_atom::value);
        if (self->state.replayed) fold_now(self);  // busy now: the next minute takes it
      },
  };
}

}  // namespace kiln::actors
