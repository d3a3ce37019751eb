#pragma once
// One pool's door in admission: the charged tokens in flight (all teams and per team) against
// the pool's capacity, and the requests waiting by tier. Arrivals are decided by the fixed
// order (actors/overload.hpp); whatever ends frees its tokens and lets the most urgent waiting
// requests in; waiting too long ends a request. Past the queue limit the newest request of the
// lowest tier present is shed. A plain class: admission drives it with the actor clock.
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include "actors/id_map.hpp"
#include "actors/overload.hpp"
#include "actors/request.hpp"

namespace kiln::actors {

class pool_gate {
 public:
  using time_point = std::chrono::steady_clock::time_point;

  /// `capacity` 0: no overload control.
  pool_gate(std::int64_t capacity = 0, std::size_t queue_limit = 256, std::chrono::milliseconds max_wait = std::chrono::seconds(60));
  // A running request points at its team's total: a copy would point into the original's (a
  // move takes the totals' nodes along).
  pool_gate(const pool_gate&) = delete;
  pool_gate& operator=(const pool_gate&) = delete;
  pool_gate(pool_gate&&) = default;
  pool_gate& operator=(pool_gate&&) = default;

  /// What became of requests: those to send to the router now, and those refused.
  struct moves {
    std::vector<request> run;
    struct refusal {
      request r;
      admission_verdict why;  ///< over_share or shed, or wait (it waited too long)
    };
    std::vector<refusal> refused;
  };

  /// A request arrives with its charge and its team's guaranteed share.
  void arrive(request r, std::int64_t charge, double share, time_point now, moves& out);
  /// A request that ran has ended: its tokens are free; waiting requests may run.
  void end(const request_id& id, time_point now, moves& out);
  /// Ends requests that have waited past max_wait.
  void expire(time_point now, moves& out);
  /// When the oldest waiting request times out (none: time_point::max()).
  time_point next_expiry() const;

  std::int64_t in_flight() const { return in_flight_; }
  std::int64_t team_in_flight(const std::string& team) const;
  /// Charged tokens in flight of one tier's requests.
  std::int64_t tier_in_flight(engine::priority tier) const { return tier_in_flight_[static_cast<std::size_t>(tier)]; }
  std::size_t waiting() const;
  std::size_t waiting(engine::priority tier) const { return queues_[static_cast<std::size_t>(tier)].size(); }
  std::int64_t capacity() const { return capacity_; }
  /// A new capacity (the pool grew or shrank); what now fits leaves the queue.
  void set_capacity(std::int64_t capacity, moves& out) {
    capacity_ = capacity;
    drain(out);
  }

 private:
  struct waiter {
    request r;
    std::int64_t charge = 0;
    double share = 0;
    time_point since;
  };
  admission_verdict verdict(const waiter& w, bool queue_full) const;
  void start(waiter w, moves& out);
  void drain(moves& out);

  std::int64_t capacity_;
  std::size_t queue_limit_;
  std::chrono::milliseconds max_wait_;
  std::int64_t in_flight_ = 0;
  /// By team; a team's entry stays (at 0) once it has run here, so a running request can
  /// point at it.
  std::map<std::string, std::int64_t> team_in_flight_;
  struct running {
    std::int64_t* team = nullptr;  ///< its team's entry in team_in_flight_
    std::int64_t charge = 0;
    engine::priority tier = engine::priority::standard;
  };
  std::int64_t tier_in_flight_[3] = {0, 0, 0};
  id_map<running> running_;
  std::deque<waiter> queues_[3];  ///< by tier: interactive, standard, batch
};

}  // namespace kiln::actors
