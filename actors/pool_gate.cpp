#include "actors/pool_gate.hpp"

#include <algorithm>

namespace kiln::actors {

pool_gate::pool_gate(std::int64_t capacity, std::size_t queue_limit, std::chrono::milliseconds max_wait)
    : capacity_(capacity), queue_limit_(queue_limit), max_wait_(max_wait) {}

std::int64_t pool_gate::team_in_flight(const std::string& team) const {
  auto it = team_in_flight_.find(team);
  return it == team_in_flight_.end() ? 0 : it->second;
}

std::size_t pool_gate::waiting() const { return queues_[0].size() + queues_[1].size() + queues_[2].size(); }

admission_verdict pool_gate::verdict(const waiter& w, bool queue_full) const {
  load_picture p;
  p.capacity = capacity_;
  p.in_flight = in_flight_;
  p.team_in_flight = team_in_flight(w.r.team);
  p.team_share = w.share;
  p.charge = w.charge;
  p.queue_full = queue_full;
  return decide(p, w.r.priority);
}

void pool_gate::start(waiter w, moves& out) {
  in_flight_ += w.charge;
  std::int64_t& team = team_in_flight_[w.r.team];
  team += w.charge;
  tier_in_flight_[static_cast<std::size_t>(w.r.priority)] += w.charge;
  running_[w.r.id] = {&team, w.charge, w.r.priority};
  out.run.push_back(std::move(w.r));
}

void pool_gate::arrive(request r, std::int64_t charge, double share, time_point now, moves& out) {
  waiter w{std::move(r), charge, share, now};
  const auto tier = static_cast<std::size_t>(w.r.priority);
  // Is there room, or a waiting request of a lower tier to give way?
  std::size_t lowest = 3;
  for (std::size_t t = 3; t-- > tier + 1;)
    if (!queues_[t].empty()) {
      lowest = t;
      break;
    }
  const bool full = waiting() >= queue_limit_;
  const admission_verdict v = verdict(w, full && lowest == 3);
  switch (v) {
    case admission_verdict::run: return start(std::move(w), out);
    case admission_verdict::over_share:
    case admission_verdict::shed: out.refused.push_back({std::move(w.r), v}); return;
    case admission_verdict::wait:
      if (full) {  // the newest of the lowest tier present gives way
        out.refused.push_back({std::move(queues_[lowest].back().r), admission_verdict::shed});
        queues_[lowest].pop_back();
      }
      queues_[tier].push_back(std::move(w));
      return;
  }
}

void pool_gate::end(const request_id& id, time_point, moves& out) {
  const std::optional<running> ended = running_.take(id);
  if (!ended) return;
  in_flight_ -= ended->charge;
  tier_in_flight_[static_cast<std::size_t>(ended->tier)] -= ended->charge;
  *ended->team -= ended->charge;
  drain(out);
}

// The most urgent tier first, oldest first; a request that still has to wait keeps its place
// and those behind it in its tier wait too.
void pool_gate::drain(moves& out) {
  for (auto& q : queues_) {
    while (!q.empty()) {
      const admission_verdict v = verdict(q.front(), false);
      if (v == admission_verdict::wait) break;
      waiter w = std::move(q.front());
      q.pop_front();
      if (v == admission_verdict::run) start(std::move(w), out);
      else out.refused.push_back({std::move(w.r), v});
    }
  }
}

void pool_gate::expire(time_point now, moves& out) {
  for (auto& q : queues_) {
    while (!q.empty() && now - q.front().since >= max_wait_) {
      out.refused.push_back({std::move(q.front().r), admission_verdict::wait});
      q.pop_front();
    }
  }
}

pool_gate::time_point pool_gate::next_expiry() const {
  time_point next = time_point::max();
  for (const auto& q : queues_)
    if (!q.empty()) next = std::min(next, q.front().since + max_wait_);
  return next;
}

}  // namespace kiln::actors
